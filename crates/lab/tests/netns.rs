//! Namespaces and veth links come up, carry traffic, and leave nothing behind.

use fjord_lab::netns::{self, Namespace};

#[test]
fn two_namespaces_ping_and_clean_up() {
    assert!(netns::is_root(), "namespace tests need root");
    let names;
    {
        let a = Namespace::create("pa").unwrap();
        let b = Namespace::create("pb").unwrap();
        netns::veth(&a, "veth0", &b, "veth0").unwrap();
        a.ip(&["addr", "add", "198.18.0.1/24", "dev", "veth0"])
            .unwrap();
        b.ip(&["addr", "add", "198.18.0.2/24", "dev", "veth0"])
            .unwrap();
        let out = a
            .exec("ping", &["-c", "1", "-W", "2", "198.18.0.2"])
            .unwrap();
        assert!(out.contains("1 received"), "{out}");
        assert!(b.links().unwrap().contains(&"veth0".to_string()));
        names = [a.name().to_string(), b.name().to_string()];
    }
    let listing = netns::ip(&["netns", "list"]).unwrap();
    for name in names {
        assert!(!listing.contains(&name), "{name} left behind");
    }
}

#[test]
fn middle_topology_builds_with_offloads_off() {
    let hosts = fjord_lab::topology::TwoHosts::with_middle().unwrap();
    let middle = hosts.middle.as_ref().unwrap();
    let features = middle.exec("ethtool", &["-k", "to-left"]).unwrap();
    assert!(
        features.contains("tcp-segmentation-offload: off"),
        "{features}"
    );
    // Nothing bridges the middle yet, so the hosts cannot reach each other.
    assert!(
        hosts
            .left
            .exec("ping", &["-c", "1", "-W", "1", "198.18.0.2"])
            .is_err()
    );
}

#[test]
fn threads_run_inside_a_namespace() {
    let hosts = fjord_lab::topology::TwoHosts::direct().unwrap();
    // The sender connects once the listener says it is bound, not after
    // guessed pauses.
    let (bound, listening) = std::sync::mpsc::channel();
    let listener = hosts
        .right
        .spawn_thread(move || {
            let listener = std::net::TcpListener::bind("198.18.0.2:7000")?;
            let _ = bound.send(());
            let (mut stream, _) = listener.accept()?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stream, &mut text)?;
            Ok(text)
        })
        .unwrap();
    if listening
        .recv_timeout(std::time::Duration::from_secs(10))
        .is_err()
    {
        panic!("the listener never bound: {:?}", listener.join());
    }
    let sender = hosts
        .left
        .spawn_thread(|| {
            let mut stream = std::net::TcpStream::connect("198.18.0.2:7000")?;
            std::io::Write::write_all(&mut stream, b"hello")
        })
        .unwrap();
    sender.join().unwrap().unwrap();
    assert_eq!(listener.join().unwrap().unwrap(), "hello");
}
