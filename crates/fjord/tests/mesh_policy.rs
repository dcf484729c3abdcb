//! The network policy, enforced on real traffic.
//!
//! Between members: node0 is in `ops`, node1 in `db`, node2 in `web`, and
//! every member holds a policy that lets ops reach db's port 5432/tcp
//! and ping anyone. node0 opens 5432 on node1 and the replies pass;
//! node0's port 22, node1 opening anything on node0, and web reaching
//! db are all stopped at their sender (`policy_outbound`). A newer
//! policy given to one member by reload spreads and opens web to db.
//!
//! From a plain WireGuard peer put in a group with `Groups =`:
//! wireguard-go enforces nothing, so what it sends that the policy does
//! not allow is stopped at the receiving member (`policy_inbound`), and
//! the member does not open what the policy does not let it.
//!
//! Needs root (and wireguard-go for the second test); without it the
//! test skips with one line (fails under CI).

mod support;

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use fjord_lab::netns::Namespace;
use fjord_lab::systems::mesh::RunningFjordMesh;
use fjord_lab::systems::wireguard::{self, Implementation, Initiator, WireguardGo};
use fjord_lab::systems::{RunningMesh, WorkDir};
use fjord_lab::topology::{LEFT_OVERLAY, Lan, RIGHT_OVERLAY, TwoHosts};
use fjord_lab::traffic::{self, BulkTransfer};
use fjord_mesh::policy::SignedPolicy;

const NODES: usize = 3;
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection the policy stops is given to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A listener on `port` in `namespace` (its socket stays there).
fn listen(namespace: &Namespace, port: u16) -> TcpListener {
    namespace
        .spawn_thread(move || {
            let listener = TcpListener::bind(("0.0.0.0", port))?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .expect("thread in the namespace")
        .join()
        .expect("listener thread")
        .expect("listening")
}

fn connect(namespace: &Namespace, to: SocketAddr) -> io::Result<TcpStream> {
    namespace
        .spawn_thread(move || TcpStream::connect_timeout(&to, CONNECT_TIMEOUT))
        .expect("thread in the namespace")
        .join()
        .expect("connect thread")
}

/// Whether a TCP connection from `client` to `address:port`, where
/// `server` listens, opens and carries a message each way.
fn reaches(server: &Namespace, client: &Namespace, address: IpAddr, port: u16) -> bool {
    let listener = listen(server, port);
    let Ok(mut outgoing) = connect(client, SocketAddr::new(address, port)) else {
        return false;
    };
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut incoming = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => panic!("accept: {error}"),
        }
    };
    let mut exchange = || -> io::Result<()> {
        incoming.set_nonblocking(false)?;
        for stream in [&outgoing, &incoming] {
            stream.set_read_timeout(Some(CONNECT_TIMEOUT))?;
        }
        let mut message = [0u8; 4];
        outgoing.write_all(b"ping")?;
        incoming.read_exact(&mut message)?;
        incoming.write_all(b"pong")?;
        outgoing.read_exact(&mut message)?;
        Ok(())
    };
    exchange().is_ok()
}

fn ifname(mesh: &RunningFjordMesh, node: usize) -> String {
    let path = mesh.config_path(node);
    let stem = path.file_stem().expect("a config file name");
    stem.to_string_lossy().into_owned()
}

fn mesh_policy(version: u64, web_reaches_db: bool) -> String {
    let mut text = format!(
        "# who may reach whom\nversion {version}\n\
         allow from group ops to group db port 5432/tcp\n\
         allow from group ops to any proto icmp\n"
    );
    if web_reaches_db {
        text.push_str("allow from group web to group db port 5432/tcp\n");
    }
    text
}

#[test]
fn members_enforce_the_policy_statefully_at_the_sender() {
    if !support::ready("mesh_policy") {
        return;
    }
    let lan = Lan::new(NODES).expect("a LAN of three hosts");
    let (_workdir, mut mesh) = support::mesh::configure(&lan.mesh_hosts(), "mesh-policy-enforced");
    for (node, group) in [(0, "ops"), (1, "db"), (2, "web")] {
        mesh.renew_certificate_in_groups(node, "1h", &[group])
            .expect("signed in a group");
        mesh.give_policy(node, &mesh_policy(1, false))
            .expect("policy signed");
    }
    support::mesh::start_direct_mesh(&mut mesh, &[0, 1, 2], CONVERGENCE_TIMEOUT);
    let host = |node: usize| &lan.hosts[node];
    let address = |node: usize| mesh.overlay_address(node);

    assert!(
        reaches(host(1), host(0), address(1), 5432),
        "ops reaches db's 5432"
    );
    let node0 = support::show_json(&ifname(&mesh, 0));
    assert_eq!(node0.policy["enforced"], true, "{:?}", node0.policy);
    assert_eq!(node0.policy["flows_by_line"]["3"], 1, "{:?}", node0.policy);
    assert_eq!(node0.drops("policy_outbound"), 0, "{:?}", node0.drops);

    assert!(!reaches(host(1), host(0), address(1), 22), "db's 22");
    assert!(support::show_json(&ifname(&mesh, 0)).drops("policy_outbound") > 0);
    assert!(
        !reaches(host(0), host(1), address(0), 5432),
        "db opens on ops"
    );
    assert!(!reaches(host(1), host(2), address(1), 5432), "web to db");
    for node in [1, 2] {
        let shown = support::show_json(&ifname(&mesh, node));
        assert!(
            shown.drops("policy_outbound") > 0,
            "node{node}: {:?}",
            shown.drops
        );
        assert_eq!(
            shown.drops("policy_inbound"),
            0,
            "node{node}: {:?}",
            shown.drops
        );
    }
    traffic::ping(host(0), address(2), 2).expect("ops pings web");
    // Echoes larger than the tunnel's MTU leave as IP fragments: the later
    // ones carry no ports and pass on their first fragment's fate.
    traffic::ping_sized(host(0), address(1), 2, Some(4000))
        .expect("ops pings db with 4,000-byte echoes (fragments)");
    assert!(
        traffic::ping(host(2), address(0), 1).is_err(),
        "web may not ping ops"
    );
    let text = support::show_text(&ifname(&mesh, 0));
    assert!(
        text.contains("network policy: version 1, 2 rules, enforced: "),
        "{text}"
    );

    // Given to one member, version 2 reaches the others by gossip.
    mesh.give_policy(0, &mesh_policy(2, true))
        .expect("policy signed");
    let summary = mesh.reload(0).expect("reload");
    assert!(summary.contains("network policy version 2"), "{summary}");
    let spread = fjord_lab::netns::wait_until(CONVERGENCE_TIMEOUT, "version 2 everywhere", || {
        (0..NODES).all(|node| support::show_json(&ifname(&mesh, node)).policy["version"] == 2)
    });
    assert!(spread.is_ok(), "{spread:?}");
    assert!(
        reaches(host(1), host(2), address(1), 5432),
        "web reaches db once version 2 allows it"
    );
    drop(mesh);
    drop(lan);
}

#[test]
fn a_plain_peer_in_a_group_is_checked_where_its_packets_arrive() {
    let wireguard_go = WireguardGo::locate();
    let missing: Vec<String> = wireguard_go.installed().err().into_iter().collect();
    if !support::ready_unless("mesh_policy", missing) {
        return;
    }
    let hosts = TwoHosts::direct().expect("two hosts");
    let workdir = WorkDir::create("mesh-policy-plain-peer").expect("work directory");
    let (member_side, plain_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    let plain = wireguard_go
        .start(&hosts.right, &plain_side, workdir.path())
        .expect("wireguard-go up");

    let (network, certificate_path) = support::lone_member(workdir.path(), &member_side, "alpha");
    let policy = "version 1\n\
                  allow from group web to member alpha port 5401/tcp\n\
                  allow from any to any proto icmp\n";
    let signed = SignedPolicy::sign(policy.as_bytes(), &network).expect("policy signed");
    let policy_path = workdir.path().join("network.policy");
    std::fs::write(&policy_path, signed.text()).unwrap();
    // The point-to-point config ends with wireguard-go's [Peer].
    let config = format!(
        "{}\nGroups = web\n\n[Mesh]\nNetwork = {}\nCertificate = {}\nPolicy = {}\n",
        member_side.wg_quick_text().as_str().trim_end(),
        network.public_key(),
        certificate_path.display(),
        policy_path.display()
    );
    let member = support::ByHand::up(&hosts.left, workdir.path(), &member_side.ifname, &config);
    let context = |what: &str| format!("{what}\nfjord log:\n{}", member.log_tail());

    traffic::wait_for_ping(
        &hosts.left,
        IpAddr::V4(RIGHT_OVERLAY),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|error| panic!("{}", context(&format!("first ping: {error}"))));
    traffic::ping(&hosts.right, IpAddr::V4(LEFT_OVERLAY), 2)
        .unwrap_or_else(|error| panic!("{}", context(&error.to_string())));
    let report = BulkTransfer::new(4 << 20)
        .timeout(Duration::from_secs(30))
        .run(
            &hosts.right,
            &hosts.left,
            SocketAddr::new(IpAddr::V4(LEFT_OVERLAY), 5401),
        )
        .unwrap_or_else(|error| panic!("{}", context(&format!("transfer: {error}"))));
    assert!(report.verified, "{report}");

    assert!(
        !reaches(&hosts.left, &hosts.right, IpAddr::V4(LEFT_OVERLAY), 5402),
        "web may not open 5402 on alpha"
    );
    let shown = support::show_json(&member_side.ifname);
    assert!(shown.drops("policy_inbound") > 0, "{:?}", shown.drops);
    assert_eq!(shown.drops("policy_outbound"), 0, "{:?}", shown.drops);
    assert!(
        !reaches(&hosts.right, &hosts.left, IpAddr::V4(RIGHT_OVERLAY), 5401),
        "alpha may not open anything on the peer"
    );
    let shown = support::show_json(&member_side.ifname);
    assert!(shown.drops("policy_outbound") > 0, "{:?}", shown.drops);
    drop(member);
    drop(plain);
}
