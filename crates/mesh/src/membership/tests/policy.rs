//! A member holds the highest version of the network's policy it was
//! given, whatever order the versions come in.

use super::*;
use crate::membership::PolicyOffer;
use crate::policy::SignedPolicy;

fn signed(sim: &Sim, version: u64) -> SignedPolicy {
    let text = format!("version {version}\nallow from any to any proto icmp\n");
    SignedPolicy::sign(text.as_bytes(), &sim.secret).unwrap()
}

#[test]
fn the_highest_version_given_stays_in_force() {
    let mut sim = Sim::new();
    sim.join(0, None);
    let node = key(0).public_key();
    let (three, two) = (signed(&sim, 3), signed(&sim, 2));
    let mesh = &mut sim.nodes.get_mut(&node).unwrap().mesh;
    assert!(mesh.policy().is_none(), "no policy: everything allowed");

    assert_eq!(
        mesh.offer_policy(three.clone()),
        PolicyOffer::Applied { version: 3 }
    );
    assert_eq!(
        mesh.offer_policy(two),
        PolicyOffer::Older {
            offered: 2,
            in_force: 3
        }
    );
    assert_eq!(
        mesh.offer_policy(three.clone()),
        PolicyOffer::Unchanged { version: 3 }
    );
    assert_eq!(mesh.policy(), Some(&three));
}
