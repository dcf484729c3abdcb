//! Issue 47 end to end: members answer DNS for the network's names. Three
//! members with `Domain = fjord.test` meet on a LAN of namespaces; from
//! node 1, node 0's overlay address answers `node2.fjord.test` (A, and
//! AAAA with no records: the lab's overlay is IPv4 only), the reverse
//! name of node 2's address, an unknown name (NXDOMAIN) and another
//! domain (REFUSED); `fjord show --json` gives node 2's
//! `node2.fjord.test`. Once node 2 is revoked in node 0's file and node 0
//! reloads, its name is unknown there. Namespaces and processes go when
//! the test ends, also when it fails.
//!
//! Needs root; without it the test skips with one line (fails under CI).

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use fjord_lab::netns::{self, Namespace};
use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, MemberPath, RunningMesh};
use fjord_lab::topology::Lan;
use fjord_mesh::names::{RecordType, query_bytes};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{Name, RData};

const NODES: usize = 3;
const ASKER: usize = 1;
const SERVER: usize = 0;
const NAMED: usize = 2;
const DOMAIN: &str = "fjord.test";
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
const REVOCATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks `server` port 53 from inside `host`, over UDP.
fn ask(host: &Namespace, server: IpAddr, name: &str, query_type: RecordType) -> Message {
    let request = query_bytes(0x4a17, name, query_type);
    let asked = host
        .spawn_thread(move || {
            let socket = UdpSocket::bind(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 0))?;
            socket.set_read_timeout(Some(Duration::from_secs(2)))?;
            socket.send_to(&request, SocketAddr::new(server, 53))?;
            let mut response = vec![0; 4096];
            let len = socket.recv(&mut response)?;
            response.truncate(len);
            Ok(response)
        })
        .expect("a thread in the namespace")
        .join()
        .expect("the asking thread ran")
        .unwrap_or_else(|error| panic!("asking {server} for {name}: {error}"));
    let reply = Message::from_vec(&asked).expect("a DNS message");
    assert_eq!(reply.metadata.id, 0x4a17, "{name}");
    reply
}

#[test]
fn members_answer_names_reverse_names_and_nothing_else() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let lan = Lan::new(NODES).expect("a LAN of three hosts");
    let workdir = systems::WorkDir::create("mesh-names").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    for node in 0..NODES {
        // [Mesh] is the config's last section.
        std::fs::OpenOptions::new()
            .append(true)
            .open(mesh.config_path(node))
            .and_then(|mut file| writeln!(file, "Domain = {DOMAIN}"))
            .expect("Domain added");
        mesh.start_node(node).expect("node started");
    }
    let converged = netns::wait_until(CONVERGENCE_TIMEOUT, "members to meet", || {
        (0..NODES).all(|node| {
            mesh.members(node).is_ok_and(|listed| {
                listed.len() == NODES - 1
                    && listed
                        .iter()
                        .all(|member| member.path == MemberPath::Direct)
            })
        })
    });
    assert!(converged.is_ok(), "{converged:?}");

    let asker = &lan.hosts[ASKER];
    let server = mesh.overlay_address(SERVER);
    let named = mesh.overlay_address(NAMED);
    let full = format!("node{NAMED}.{DOMAIN}");

    let reply = ask(asker, server, &full, RecordType::A);
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    let addresses: Vec<RData> = reply.answers.iter().map(|r| r.data.clone()).collect();
    let IpAddr::V4(named_v4) = named else {
        panic!("the lab's overlay is IPv4");
    };
    assert_eq!(addresses, vec![RData::A(named_v4.into())]);

    let reply = ask(asker, server, &full.to_uppercase(), RecordType::AAAA);
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert!(reply.answers.is_empty(), "{reply:?}");

    let reverse = Name::from(named).to_ascii();
    let reply = ask(asker, server, &reverse, RecordType::PTR);
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    let ptr = reply.answers.first().map(|r| r.data.to_string());
    assert_eq!(ptr, Some(format!("{full}.")), "{reply:?}");

    // The server names itself too.
    let reply = ask(
        asker,
        server,
        &format!("node{SERVER}.{DOMAIN}"),
        RecordType::A,
    );
    assert_eq!(reply.answers.len(), 1, "{reply:?}");

    let reply = ask(asker, server, &format!("nobody.{DOMAIN}"), RecordType::A);
    assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
    let reply = ask(asker, server, "example.com", RecordType::A);
    assert_eq!(reply.metadata.response_code, ResponseCode::Refused);

    // `fjord show --json` (all interfaces) gives each member's name.
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_fjord"))
        .args(["show", "--json"])
        .output()
        .expect("run fjord show");
    let reports: serde_json::Value =
        serde_json::from_slice(&shown.stdout).expect("fjord show --json prints JSON");
    let named_key = mesh.public_key(NAMED).to_string();
    let listed = reports.as_array().into_iter().flatten().any(|report| {
        report["domain"] == DOMAIN && report["dns_names"][&named_key] == full.as_str()
    });
    assert!(listed, "{reports:#}");

    // Revoked at the server: gone from its answers.
    mesh.revoke_in_file(SERVER, NAMED)
        .expect("revocation written");
    mesh.reload(SERVER).expect("reloaded");
    let gone = netns::wait_until(REVOCATION_TIMEOUT, "the revoked name to go", || {
        ask(asker, server, &full, RecordType::A)
            .metadata
            .response_code
            == ResponseCode::NXDomain
    });
    assert!(gone.is_ok(), "{gone:?}");
    drop(mesh);
    drop(lan);
}
