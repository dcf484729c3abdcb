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
        a.ip(&["addr", "add", "198.18.0.1/24", "dev", "veth0"]).unwrap();
        b.ip(&["addr", "add", "198.18.0.2/24", "dev", "veth0"]).unwrap();
        let out = a.exec("ping", &["-c", "1", "-W", "2", "198.18.0.2"]).unwrap();
        assert!(out.contains("1 received"), "{out}");
        assert!(b.links().unwrap().contains(&"veth0".to_string()));
        names = [a.name().to_string(), b.name().to_string()];
    }
    let listing = netns::ip(&["netns", "list"]).unwrap();
    for name in names {
        assert!(!listing.contains(&name), "{name} left behind");
    }
}
