//! `fjord lab run --rounds N`: every suite on every system N times,
//! interleaved (bare, fjord, the peers, then all of them again), and each
//! figure the median of its rounds' figures.
//!
//! On a small machine one run of one system can be 20–30 % off its
//! neighbour's (a noisy minute, another tenant of the host), and a ratio
//! of two such runs carries both errors. Interleaving spreads a slow
//! stretch over every system, and the median of the rounds discards the
//! odd one out; the rounds' range is kept beside it so a report shows how
//! far a figure moved.

use crate::results::{Measurement, MeasurementStatus, Rounds, median};

/// Most rounds `--rounds` takes: each is a whole run of every suite.
pub const MAX_ROUNDS: u32 = 20;

/// The rows of interleaved rounds (`rounds[r]`: round r's rows, in the
/// order measured) merged into one row per suite, test, system and
/// parameters, in the order they first appeared; a suite that gives one
/// such row twice in a round gets two merged rows. A row that ran in one
/// round only is kept as it is.
///
/// The merged row is the round whose figure is nearest the median of the
/// rounds' figures (its supporting figures, such as CPU time, belong to
/// that round), with the median itself, every round's samples, and the
/// rounds' figures in `extra.round_medians`. Rounds that failed do not
/// count towards the median; a row failed in every round stays failed.
pub fn merge(rounds: Vec<Vec<Measurement>>) -> Vec<Measurement> {
    // Each group: how many same rows of a round came before its first
    // one, and the rows.
    let mut groups: Vec<(usize, Vec<Measurement>)> = Vec::new();
    for round in rounds {
        let mut seen: Vec<&Measurement> = Vec::new();
        let mut placed = Vec::with_capacity(round.len());
        for measurement in &round {
            let occurrence = seen.iter().filter(|m| same_row(m, measurement)).count();
            seen.push(measurement);
            let group = groups
                .iter()
                .position(|(n, rows)| *n == occurrence && same_row(&rows[0], measurement));
            placed.push((group, occurrence));
        }
        for (measurement, (group, occurrence)) in round.into_iter().zip(placed) {
            match group {
                Some(index) => groups[index].1.push(measurement),
                None => groups.push((occurrence, vec![measurement])),
            }
        }
    }
    groups
        .into_iter()
        .map(|(_, rows)| merge_group(rows))
        .collect()
}

fn same_row(a: &Measurement, b: &Measurement) -> bool {
    a.system == b.system && a.same_test(b)
}

fn merge_group(mut group: Vec<Measurement>) -> Measurement {
    if group.len() == 1 {
        return group.remove(0);
    }
    let rounds = group.len();
    let unverified = group.iter().any(|m| m.extra.verified() == Some(false));
    let (ok, failed): (Vec<Measurement>, Vec<Measurement>) = group
        .into_iter()
        .partition(|m| m.status == MeasurementStatus::Ok);
    let Some(first_ok) = ok.first() else {
        let mut merged = failed.into_iter().next().expect("a group is never empty");
        merged.add_note(format!("not measured in any of {rounds} rounds"));
        return merged;
    };
    let figures: Vec<f64> = ok.iter().map(|m| m.median).collect();
    let middle = median(&figures);
    let nearest = ok
        .iter()
        .min_by(|a, b| {
            (a.median - middle)
                .abs()
                .total_cmp(&(b.median - middle).abs())
        })
        .unwrap_or(first_ok);
    let mut merged = nearest.clone();
    merged.median = middle;
    merged.samples = ok.iter().flat_map(|m| m.samples.iter().copied()).collect();
    merged.extra.rounds = Some(Rounds {
        round_medians: Some(figures),
    });
    if unverified {
        merged.extra.bulk.get_or_insert_default().verified = Some(false);
    }
    if !failed.is_empty() {
        merged.add_note(format!(
            "measured in {} of {rounds} rounds ({})",
            ok.len(),
            failed[0].failure_word()
        ));
    }
    merged
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::results::{Cost, Extra};

    fn row(system: &str, streams: u32, figure: f64, cpu: f64) -> Measurement {
        Measurement {
            suite: "quick".into(),
            test: "tcp_bulk".into(),
            system: system.into(),
            params: BTreeMap::from([("streams".into(), serde_json::json!(streams))]),
            unit: "bit/s".into(),
            samples: vec![figure - 1.0, figure, figure + 1.0],
            median: figure,
            ratio_to_bare: None,
            status: MeasurementStatus::Ok,
            extra: Extra {
                cost: Some(Cost {
                    cpu_seconds: Some(cpu),
                    ..Cost::default()
                }),
                ..Extra::default()
            },
            note: None,
        }
    }

    #[test]
    fn each_row_becomes_the_median_of_its_rounds_in_first_seen_order() {
        let rounds = vec![
            vec![row("bare", 1, 100.0, 1.0), row("fjord", 1, 50.0, 2.0)],
            vec![row("bare", 1, 90.0, 1.1), row("fjord", 1, 20.0, 2.1)],
            vec![row("bare", 1, 120.0, 1.2), row("fjord", 1, 40.0, 2.2)],
        ];
        let merged = merge(rounds);
        assert_eq!(merged.len(), 2);
        let (bare, fjord) = (&merged[0], &merged[1]);
        assert_eq!((bare.system.as_str(), bare.median), ("bare", 100.0));
        assert_eq!((fjord.system.as_str(), fjord.median), ("fjord", 40.0));
        // Supporting figures come from the round nearest the median.
        assert_eq!(fjord.extra.cost.as_ref().unwrap().cpu_seconds, Some(2.2));
        let rounds = fjord.extra.rounds.as_ref().unwrap();
        assert_eq!(rounds.round_medians, Some(vec![50.0, 20.0, 40.0]));
        assert_eq!(fjord.samples.len(), 9);
    }

    #[test]
    fn rows_differing_only_in_parameters_stay_apart() {
        let merged = merge(vec![
            vec![row("fjord", 1, 50.0, 1.0), row("fjord", 4, 70.0, 1.0)],
            vec![row("fjord", 1, 60.0, 1.0)],
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].median, 55.0);
        assert_eq!(merged[1].median, 70.0);
        assert_eq!(merged[1].extra.rounds, None, "one round: as it was");
    }

    #[test]
    fn failed_rounds_are_left_out_and_said() {
        let mut failed = row("fjord", 1, 0.0, 0.0);
        failed.status = MeasurementStatus::Failed;
        let mut unverified = row("fjord", 1, 30.0, 1.0);
        unverified.extra.bulk.get_or_insert_default().verified = Some(false);
        let merged = merge(vec![
            vec![row("fjord", 1, 50.0, 1.0)],
            vec![failed.clone()],
            vec![unverified],
        ]);
        assert_eq!(merged[0].median, 40.0);
        assert_eq!(merged[0].status, MeasurementStatus::Ok);
        assert_eq!(merged[0].extra.verified(), Some(false));
        assert!(merged[0].note.as_deref().unwrap().contains("2 of 3 rounds"));

        let merged = merge(vec![vec![failed.clone()], vec![failed]]);
        assert_eq!(merged[0].status, MeasurementStatus::Failed);
        assert!(
            merged[0]
                .note
                .as_deref()
                .unwrap()
                .contains("any of 2 rounds")
        );
    }

    #[test]
    fn one_round_comes_back_as_it_was() {
        let round = vec![
            row("bare", 1, 100.0, 1.0),
            row("fjord", 1, 10.0, 1.0),
            row("fjord", 1, 20.0, 2.0),
            row("fjord", 4, 30.0, 3.0),
        ];
        assert_eq!(merge(vec![round.clone()]), round);
    }

    #[test]
    fn a_row_given_twice_in_a_round_pairs_with_its_own_repeat() {
        let merged = merge(vec![
            vec![row("fjord", 1, 10.0, 1.0), row("fjord", 1, 100.0, 1.0)],
            vec![row("fjord", 1, 20.0, 1.0), row("fjord", 1, 200.0, 1.0)],
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].median, 15.0);
        assert_eq!(merged[1].median, 150.0);
    }
}
