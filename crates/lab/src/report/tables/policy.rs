//! The policy suite's table: each phase's figure beside the same
//! system's figure without the flood and without the policy, and the
//! target's tracked flows against its cap.

use super::{Table, figure_per_system, median_figure};
use crate::report::format;
use crate::report::sections::Section;
use crate::results::{Measurement, MeasurementStatus};

pub(super) fn policy_table(section: &Section, title: String) -> Table {
    let cell = |m: &Measurement| {
        if m.status != MeasurementStatus::Ok {
            return median_figure(m);
        }
        let mut parts = Vec::new();
        let tracking = m.extra.tracking.as_ref();
        match section.test {
            "policy_tracked_flows" => {
                parts.push(format!("{} flows", format::thousands(m.median)));
                if let Some(cap) = tracking.and_then(|t| t.flows_cap_per_peer) {
                    parts.push(format!("cap {}/peer", format::thousands(cap as f64)));
                }
                if let Some(opened) = tracking.and_then(|t| t.flows_opened) {
                    parts.push(format!("{} opened", format::thousands(opened as f64)));
                }
                if let Some(evicted) = tracking.and_then(|t| t.evicted_flows) {
                    parts.push(format!("{} evicted", format::thousands(evicted as f64)));
                }
                if let Some(growth) = tracking.and_then(|t| t.rss_growth_bytes) {
                    let sign = if growth < 0 { "−" } else { "+" };
                    let size = format::quantity(growth.unsigned_abs() as f64, "bytes");
                    parts.push(format!("RSS {sign}{size}"));
                }
            }
            _ => {
                parts.push(format::quantity(m.median, &m.unit));
                if let Some(ratio) = m.extra.flood.as_ref().and_then(|f| f.no_flood_ratio) {
                    parts.push(format!("{} of no flood", format::ratio(ratio)));
                }
                if let Some(ratio) = tracking.and_then(|t| t.no_policy_ratio) {
                    parts.push(format!("{} of no policy", format::ratio(ratio)));
                }
            }
        }
        parts.join(" · ")
    };
    let remark = match section.test {
        "policy_tracked_flows" => "the flows the target's firewall tracks after the scanner's flows, by its own count, against the most it keeps for one peer; what it evicted; its resident memory against before the scan".to_string(),
        _ => "median of verified transfers · against the same transfers without the flood · against the same phase without a policy".to_string(),
    };
    figure_per_system(section, title, &[remark], &cell)
}
