use super::*;
use crate::emulator::config::{GilbertElliott, Probability, QueueLimit, Reorder};

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

fn prob(value: f64) -> Probability {
    Probability::new(value).unwrap()
}

fn release(verdict: Verdict) -> Duration {
    match verdict {
        Verdict::Forward { release, .. } => release,
        Verdict::Drop(reason) => panic!("dropped: {reason:?}"),
    }
}

#[test]
fn a_transparent_link_forwards_at_arrival() {
    let mut link = LinkModel::new(LinkConfig::default());
    assert_eq!(
        link.handle_frame(ms(5), 100),
        Verdict::Forward {
            release: ms(5),
            duplicate: None
        }
    );
}

#[test]
fn fixed_delay_is_added_exactly() {
    let mut link = LinkModel::new(LinkConfig::delayed(ms(20)));
    for t in [0, 1, 7, 1000] {
        assert_eq!(release(link.handle_frame(ms(t), 1500)), ms(t + 20));
    }
}

#[test]
fn fifo_jitter_never_reorders_and_stays_within_bounds() {
    let config = LinkConfig {
        delay: ms(10),
        jitter: ms(5),
        ..LinkConfig::default()
    };
    let mut link = LinkModel::new(config);
    let mut previous = Duration::ZERO;
    let mut spread = Duration::ZERO;
    for i in 0..10_000u64 {
        let now = Duration::from_micros(i * 100);
        let at = release(link.handle_frame(now, 100));
        assert!(at >= previous, "reordered at frame {i}");
        assert!(at >= now + ms(10) && at <= now + ms(15) + Duration::from_micros(100));
        spread = spread.max(at - now - ms(10));
        previous = at;
    }
    assert!(spread > ms(4));
}

#[test]
fn free_jitter_reorders_and_averages_half_the_jitter() {
    let config = LinkConfig {
        delay: ms(10),
        jitter: ms(4),
        jitter_order: JitterOrder::Reorder,
        ..LinkConfig::default()
    };
    let mut link = LinkModel::new(config);
    let n = 100_000u64;
    let (mut overtaken, mut previous, mut extra_sum) = (0, Duration::ZERO, 0.0);
    for i in 0..n {
        let now = Duration::from_micros(i * 100);
        let at = release(link.handle_frame(now, 100));
        if at < previous {
            overtaken += 1;
        }
        previous = at;
        extra_sum += (at - now - ms(10)).as_secs_f64();
    }
    assert!(overtaken > n / 4, "{overtaken}");
    let mean_extra = extra_sum / n as f64;
    assert!((mean_extra - 0.002).abs() < 0.00005, "{mean_extra}");
}

#[test]
fn random_loss_and_duplicates_match_their_probabilities() {
    let config = LinkConfig {
        loss: prob(0.05),
        duplicate: prob(0.02),
        seed: 42,
        ..LinkConfig::default()
    };
    let mut link = LinkModel::new(config.clone());
    let n = 200_000u64;
    let mut decisions = Vec::new();
    for i in 0..n {
        decisions.push(link.handle_frame(Duration::from_micros(i), 64));
    }
    let stats = *link.stats();
    // 4σ of binomial(200k, 0.05) is 0.195 %; of the duplicates among the
    // 190k survivors at 2 %, 0.13 %.
    let loss = stats.dropped.random_loss as f64 / n as f64;
    assert!((loss - 0.05).abs() < 0.00195, "{loss}");
    let dup = stats.duplicated as f64 / (n - stats.dropped.random_loss) as f64;
    assert!((dup - 0.02).abs() < 0.0013, "{dup}");
    // The same seed replays the same decisions.
    let mut again = LinkModel::new(config);
    for (i, decision) in decisions.iter().enumerate() {
        assert_eq!(
            again.handle_frame(Duration::from_micros(i as u64), 64),
            *decision
        );
    }
}

#[test]
fn streams_are_independent_across_impairments() {
    let lossy = LinkConfig {
        loss: prob(0.1),
        ..LinkConfig::default()
    };
    let lossy_and_jittery = LinkConfig {
        jitter: ms(3),
        duplicate: prob(0.1),
        ..lossy.clone()
    };
    let mut a = LinkModel::new(lossy);
    let mut b = LinkModel::new(lossy_and_jittery);
    for i in 0..10_000u64 {
        let now = Duration::from_micros(i);
        let lost_a = matches!(a.handle_frame(now, 64), Verdict::Drop(_));
        let lost_b = matches!(b.handle_frame(now, 64), Verdict::Drop(_));
        assert_eq!(lost_a, lost_b, "frame {i}");
    }
}

#[test]
fn bursty_loss_is_counted_apart_from_random_loss() {
    let config = LinkConfig {
        gilbert_elliott: Some(GilbertElliott::gilbert(prob(0.01), prob(0.25))),
        ..LinkConfig::default()
    };
    let mut link = LinkModel::new(config);
    for i in 0..100_000u64 {
        link.handle_frame(Duration::from_micros(i), 64);
    }
    let stats = link.stats();
    assert_eq!(stats.dropped.random_loss, 0);
    let rate = stats.dropped.burst_loss as f64 / 100_000.0;
    assert!((rate - 0.01 / 0.26).abs() < 0.01, "{rate}");
}

#[test]
fn reordered_frames_are_held_back_and_overtaken() {
    let config = LinkConfig {
        delay: ms(1),
        reorder: Some(Reorder {
            probability: prob(0.1),
            extra_delay: ms(2),
        }),
        ..LinkConfig::default()
    };
    let mut link = LinkModel::new(config);
    let mut releases = Vec::new();
    for i in 0..10_000u64 {
        releases.push(release(
            link.handle_frame(Duration::from_micros(i * 100), 100),
        ));
    }
    let held = releases
        .iter()
        .enumerate()
        .filter(|&(i, at)| *at == Duration::from_micros(i as u64 * 100) + ms(3))
        .count() as u64;
    assert_eq!(held, link.stats().reordered);
    let rate = held as f64 / 10_000.0;
    assert!((rate - 0.1).abs() < 0.012, "{rate}");
    // Frames not held back keep their plain delay: reordering does not
    // hold up the frames behind.
    let plain = releases
        .iter()
        .enumerate()
        .filter(|&(i, at)| *at == Duration::from_micros(i as u64 * 100) + ms(1))
        .count() as u64;
    assert_eq!(plain + held, 10_000);
}

#[test]
fn rate_limit_then_delay_and_tail_drop_of_the_queue() {
    let config = LinkConfig {
        delay: ms(10),
        rate_bits_per_sec: Some(1_000_000),
        queue_limit: QueueLimit {
            packets: Some(2),
            bytes: None,
        },
        ..LinkConfig::default()
    };
    let mut link = LinkModel::new(config);
    assert_eq!(release(link.handle_frame(ms(0), 1000)), ms(18));
    assert_eq!(release(link.handle_frame(ms(0), 1000)), ms(26));
    assert_eq!(
        link.handle_frame(ms(0), 1000),
        Verdict::Drop(DropReason::QueueFull)
    );
    assert_eq!(link.stats().dropped.queue_full, 1);
    assert_eq!(link.stats().queue_high_water_packets, 2);
    assert_eq!(link.stats().queue_high_water_bytes, 2000);
}

#[test]
fn a_duplicate_takes_its_own_place_in_the_queue() {
    let config = LinkConfig {
        rate_bits_per_sec: Some(1_000_000),
        duplicate: Probability::ONE,
        ..LinkConfig::default()
    };
    let mut link = LinkModel::new(config);
    assert_eq!(
        link.handle_frame(ms(0), 1000),
        Verdict::Forward {
            release: ms(8),
            duplicate: Some(ms(16))
        }
    );
    assert_eq!(link.stats().duplicated, 1);
}
