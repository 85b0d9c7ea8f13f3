//! docs/evidence.md is the contract a reader audits: held to the code here.

use conform_gate::allowlist::Reason;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/evidence.md")).unwrap()
}

#[test]
fn the_rules_out_table_is_what_the_statistics_give() {
    let doc = doc();
    let rows: Vec<(u64, f64)> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let n = cells.first()?.parse().ok()?;
            let rate = cells.get(1)?.strip_suffix(" %")?.parse().ok()?;
            Some((n, rate))
        })
        .collect();
    assert!(rows.len() >= 5, "{rows:?}");
    for (n, rate) in rows {
        let bound = conform_allowlist::stats::failure_rate_upper_bound(0, n, 0.95) * 100.0;
        assert!(
            (bound - rate).abs() < 0.051,
            "{n} calls: the page says {rate} %, the code {bound:.2} %"
        );
    }
}

#[test]
fn every_reason_is_named_and_in_the_order_the_decision_checks_them() {
    let doc = doc();
    let listed = doc
        .split("The reasons, in the order they are checked:")
        .nth(1)
        .unwrap();
    let mut last = 0;
    for reason in Reason::ALL {
        let code = format!("`{}`", reason.code());
        let at = listed
            .find(&code)
            .unwrap_or_else(|| panic!("{code} is not on the page"));
        assert!(at >= last, "{code} is out of order");
        last = at;
    }
}

#[test]
fn the_operational_fields_are_the_ones_the_identity_leaves_out() {
    let doc = doc();
    let para = doc
        .split("**Operational settings are outside the identity**")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    for field in conform_config::identity::OPERATIONAL {
        assert!(
            para.contains(&format!("`{field}`")) || para.contains(&format!("`[{field}]`")),
            "{field} is not named as operational"
        );
    }
}

#[test]
fn the_default_bound_and_the_drift_example_are_what_the_code_gives() {
    use conform_allowlist::DEFAULT_MAX_UNDETECTED_FAILURE_RATE as DEFAULT;
    use conform_allowlist::stats::{drift_upper_bound, failure_rate_upper_bound};
    let doc = doc();
    assert!(
        doc.contains(&format!("{:.0} % unless the project says", DEFAULT * 100.0)),
        "the page does not state the default bound"
    );
    // "29 calls without a failure meet it", and 28 do not.
    assert!(failure_rate_upper_bound(0, 29, 0.95) <= DEFAULT);
    assert!(failure_rate_upper_bound(0, 28, 0.95) > DEFAULT);
    assert!(doc.contains("(29 calls without a failure meet it"));
    // The drift example: 111 of 120 pairs against a floor of 120 of 120.
    let drift = drift_upper_bound((111, 120), (120, 120), 0.95).unwrap();
    let shown = (drift * 10_000.0).ceil() / 100.0;
    assert!(
        doc.contains(&format!("a drift above {shown:.1} %")),
        "the page's drift example is not {shown:.1} %"
    );
}
