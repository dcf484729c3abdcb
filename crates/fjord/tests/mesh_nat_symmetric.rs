//! Two members behind symmetric NATs (`masquerade fully-random`) meet a
//! member behind a port-preserving NAT by port prediction, the second one
//! started while the first is still meeting the mesh: each goes direct to
//! the port-preserving member within seconds of its start, whoever came
//! first (the README's "about 2 s").
//!
//! `second_symmetric_member_measured` (ignored: minutes) repeats the run
//! with the second member started 0, 3 and 8 s after the first and prints
//! a table of the times (`FJORD_NAT_TRIES` tries each, 10 unless set;
//! `FJORD_NAT_DELAYS=0,3,8` and `FJORD_NAT_KINDS=pub,pp,sym,sym[,...]`
//! change the runs; `FJORD_NAT_KEEP=DIR` keeps each try's logs, the NATs'
//! conntrack tables and the port-preserving NAT's conntrack events).
//!
//! Needs root and nft; without root the tests skip with one line (fail
//! under CI).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fjord_lab::nat::{NatInternet, NatKind};
use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, MemberPath, RunningMesh, WorkDir};

/// The sites: the public bootstrap member, the port-preserving member,
/// the two symmetric members.
const KINDS: [NatKind; 4] = [
    NatKind::Public,
    NatKind::PortPreserving,
    NatKind::Symmetric,
    NatKind::Symmetric,
];
const PORT_PRESERVING: usize = 1;
const FIRST_SYMMETRIC: usize = 2;
const SECOND_SYMMETRIC: usize = 3;
/// What the test asks of each symmetric member, from its own start.
const DIRECT_WITHIN: Duration = Duration::from_secs(5);

/// When each symmetric member listed the port-preserving one as direct
/// (and was listed so), from its own start; `None` if not within `limit`.
struct Try {
    first: Option<Duration>,
    second: Option<Duration>,
}

fn direct_both_ways(mesh: &mut dyn RunningMesh, a: usize, b: usize) -> bool {
    let direct = |mesh: &mut dyn RunningMesh, node, other| {
        mesh.member(node, other)
            .is_some_and(|member| member.path == MemberPath::Direct)
    };
    direct(mesh, a, b) && direct(mesh, b, a)
}

/// One try: every member but the second symmetric one starts at once,
/// that one `delay` later; watched until both are direct to the
/// port-preserving member or `limit` after the second's start. Logs and
/// the port-preserving NAT's conntrack table go to `keep`, when given.
fn run_try(delay: Duration, limit: Duration, keep: Option<&std::path::Path>) -> Try {
    let kinds: Vec<NatKind> = match std::env::var("FJORD_NAT_KINDS") {
        Ok(list) => list
            .split(',')
            .map(|kind| match kind {
                "pub" => NatKind::Public,
                "pp" => NatKind::PortPreserving,
                _ => NatKind::Symmetric,
            })
            .collect(),
        Err(_) => KINDS.to_vec(),
    };
    let internet = NatInternet::build(&kinds).expect("namespaces and NATs");
    // The port-preserving NAT's conntrack events (`conntrack -E`, when
    // installed): which mapping each of its host's flows got, and when.
    let mut events = keep.and_then(|keep| {
        let _ = std::fs::create_dir_all(keep);
        let file = std::fs::File::create(keep.join("events-site1")).ok()?;
        internet.sites[PORT_PRESERVING]
            .nat
            .as_ref()?
            .command("conntrack")
            .args([
                "-E",
                "-p",
                "udp",
                "-o",
                "timestamp",
                "--buffer-size",
                "16777216",
            ])
            .stdout(file)
            .spawn()
            .ok()
    });
    let workdir = WorkDir::create("mesh-nat-symmetric").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .configure(&internet.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    let started = Instant::now();
    for node in (0..kinds.len()).filter(|node| *node != SECOND_SYMMETRIC) {
        mesh.start_node(node).expect("node started");
    }
    let mut second_started = None;
    let mut outcome = Try {
        first: None,
        second: None,
    };
    loop {
        let now = Instant::now();
        if second_started.is_none() && now >= started + delay {
            mesh.start_node(SECOND_SYMMETRIC).expect("node started");
            second_started = Some(Instant::now());
        }
        if outcome.first.is_none() && direct_both_ways(&mut mesh, FIRST_SYMMETRIC, PORT_PRESERVING)
        {
            outcome.first = Some(started.elapsed());
        }
        if let Some(at) = second_started
            && outcome.second.is_none()
            && direct_both_ways(&mut mesh, SECOND_SYMMETRIC, PORT_PRESERVING)
        {
            outcome.second = Some(at.elapsed());
        }
        let done = outcome.first.is_some() && outcome.second.is_some();
        if done || second_started.is_some_and(|at| at.elapsed() >= limit) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(keep) = keep {
        let _ = std::fs::create_dir_all(keep);
        for node in 0..kinds.len() {
            let name = format!("node{node}.log");
            let _ = std::fs::copy(mesh.dir().join(&name), keep.join(&name));
        }
        for (index, site) in internet.sites.iter().enumerate() {
            let Some(nat) = site.nat.as_ref() else {
                continue;
            };
            let table = nat
                .command("cat")
                .arg("/proc/net/nf_conntrack")
                .output()
                .map(|output| output.stdout)
                .unwrap_or_default();
            let _ = std::fs::write(keep.join(format!("conntrack-site{index}")), table);
        }
    }
    if let Some(mut events) = events.take() {
        let _ = events.kill();
        let _ = events.wait();
    }
    // Nodes stop before their namespaces go.
    drop(mesh);
    drop(internet);
    outcome
}

#[test]
fn two_symmetric_members_started_apart_both_go_direct_to_a_port_preserving_one() {
    if !systems::running_as_root("needs root (network namespaces, nftables)") {
        return;
    }
    let outcome = run_try(Duration::from_secs(3), DIRECT_WITHIN, None);
    eprintln!(
        "symmetric members direct to the port-preserving one after {:?} and {:?}",
        outcome.first, outcome.second
    );
    assert!(
        outcome.first.is_some_and(|took| took <= DIRECT_WITHIN),
        "the first symmetric member was not direct within {DIRECT_WITHIN:?}"
    );
    assert!(
        outcome.second.is_some_and(|took| took <= DIRECT_WITHIN),
        "the second symmetric member, started 3 s later, was not direct within {DIRECT_WITHIN:?}"
    );
}

/// Median, min and max of the tries that went direct, and how many did
/// within [`DIRECT_WITHIN`].
fn summary(times: &[Option<Duration>]) -> String {
    let mut direct: Vec<Duration> = times.iter().flatten().copied().collect();
    direct.sort();
    let within = direct.iter().filter(|took| **took <= DIRECT_WITHIN).count();
    let seconds = |took: Option<&Duration>| {
        took.map_or("-".to_string(), |took| format!("{:.2}", took.as_secs_f64()))
    };
    format!(
        "min {} median {} max {}; {within}/{} within {}s",
        seconds(direct.first()),
        seconds(direct.get(direct.len() / 2)),
        seconds(direct.last()),
        times.len(),
        DIRECT_WITHIN.as_secs()
    )
}

#[test]
#[ignore = "minutes: run by hand for the README's figures"]
fn second_symmetric_member_measured() {
    if !systems::running_as_root("needs root (network namespaces, nftables)") {
        return;
    }
    let tries: usize = std::env::var("FJORD_NAT_TRIES")
        .ok()
        .and_then(|tries| tries.parse().ok())
        .unwrap_or(10);
    let keep = std::env::var_os("FJORD_NAT_KEEP").map(PathBuf::from);
    let delays: Vec<u64> = std::env::var("FJORD_NAT_DELAYS")
        .ok()
        .map(|delays| delays.split(',').filter_map(|d| d.parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 3, 8]);
    let mut table = Vec::new();
    for delay in delays {
        let mut firsts = Vec::new();
        let mut seconds = Vec::new();
        for attempt in 0..tries {
            let keep = keep
                .as_ref()
                .map(|dir| dir.join(format!("delay{delay}-try{attempt}")));
            let outcome = run_try(
                Duration::from_secs(delay),
                Duration::from_secs(20),
                keep.as_deref(),
            );
            eprintln!(
                "second started {delay} s later, try {attempt}: first {:?}, second {:?}",
                outcome.first, outcome.second
            );
            firsts.push(outcome.first);
            seconds.push(outcome.second);
        }
        table.push(format!(
            "| {delay} s | first: {} | second: {} |",
            summary(&firsts),
            summary(&seconds)
        ));
    }
    eprintln!("{}", table.join("\n"));
}
