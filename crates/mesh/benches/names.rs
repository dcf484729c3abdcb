//! Member names over DNS, per request: a member answering an A query for
//! a member's name (`names/a/N`) and a PTR query for a member's address
//! (`names/ptr/N`) with N = 100 and 10,000 members, each request cycling
//! through the members. Issue 47's goal: under 1 ms a request at 100
//! members (expect microseconds).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fjord_mesh::names::{NamedMember, Names, RecordType, query_bytes};

const MEMBER_COUNTS: [usize; 2] = [100, 10_000];

fn member_address(index: usize) -> Ipv4Addr {
    let [_, _, high, low] = (index as u32).to_be_bytes();
    Ipv4Addr::new(198, 19, high, low)
}

fn names_with(count: usize) -> Names {
    let mut names = Names::new("mesh.example".parse().expect("a valid domain"));
    let members: Vec<NamedMember> = (0..count)
        .map(|index| NamedMember {
            name: format!("member{index}"),
            addresses: vec![IpAddr::V4(member_address(index))],
        })
        .collect();
    names.set_members(&members);
    names
}

fn reverse_name(address: Ipv4Addr) -> String {
    let [a, b, c, d] = address.octets();
    format!("{d}.{c}.{b}.{a}.in-addr.arpa.")
}

fn answering(c: &mut Criterion) {
    let mut group = c.benchmark_group("names");
    group.throughput(Throughput::Elements(1));
    for count in MEMBER_COUNTS {
        let names = names_with(count);
        let a_queries: Vec<Vec<u8>> = (0..count)
            .map(|index| query_bytes(1, &format!("member{index}.mesh.example."), RecordType::A))
            .collect();
        let ptr_queries: Vec<Vec<u8>> = (0..count)
            .map(|index| query_bytes(1, &reverse_name(member_address(index)), RecordType::PTR))
            .collect();
        for (kind, queries) in [("a", &a_queries), ("ptr", &ptr_queries)] {
            let mut response = Vec::with_capacity(512);
            let mut next = 0;
            group.bench_function(format!("{kind}/{count}"), |b| {
                b.iter(|| {
                    next = (next + 1) % queries.len();
                    black_box(names.answer(black_box(&queries[next]), &mut response))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, answering);
criterion_main!(benches);
