//! Any bytes into the reader: it never panics, and it never permits anything that an
//! independent oracle does not find in a valid, unexpired entry.
//!
//! Two properties of 100,000 cases each: arbitrary byte strings (raw, and soups of JSON
//! tokens so that some of them parse), and valid files mutated at the byte and at the
//! JSON level. Every case asks every (suite, provider) pair under several observations.

use conform_gate::allowlist::{Allowlist, FORMAT, Observed, Required};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::datetime;

const AT: OffsetDateTime = datetime!(2030-01-01 0:00 UTC);
const SUITES: [&str; 3] = ["s1", "s2", "s3"];
const PROVIDERS: [&str; 2] = ["p1", "p2"];
const MODELS: [&str; 3] = ["m1", "m2", "m3"];
const FINGERPRINTS: [&str; 2] = ["fp1", "fp2"];
const DIGESTS: [&str; 2] = ["d1", "d2"];
const CASES: u32 = 100_000;

fn config() -> Config {
    Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Every observation the queries use: nothing, and each field alone or together.
const OBSERVATIONS: [Observed<'static>; 8] = [
    Observed {
        suite_digest: None,
        served_model: None,
        system_fingerprint: None,
        provider_digest: None,
        simulated: false,
        suite_identity: None,
        provider_identity: None,
        suite_repeats: None,
        trust: None,
        references: None,
        seen: None,
    },
    Observed {
        suite_digest: Some("d1"),
        served_model: None,
        system_fingerprint: None,
        provider_digest: None,
        simulated: false,
        suite_identity: None,
        provider_identity: None,
        suite_repeats: None,
        trust: None,
        references: None,
        seen: None,
    },
    Observed {
        suite_digest: Some("d2"),
        served_model: None,
        system_fingerprint: None,
        provider_digest: None,
        simulated: false,
        suite_identity: None,
        provider_identity: None,
        suite_repeats: None,
        trust: None,
        references: None,
        seen: None,
    },
    Observed {
        suite_digest: None,
        served_model: Some("m1"),
        system_fingerprint: None,
        provider_digest: None,
        simulated: false,
        suite_identity: None,
        provider_identity: None,
        suite_repeats: None,
        trust: None,
        references: None,
        seen: None,
    },
    Observed {
        suite_digest: None,
        served_model: Some("m3"),
        system_fingerprint: None,
        provider_digest: None,
        simulated: false,
        suite_identity: None,
        provider_identity: None,
        suite_repeats: None,
        trust: None,
        references: None,
        seen: None,
    },
    Observed {
        suite_digest: None,
        served_model: None,
        system_fingerprint: Some("fp2"),
        provider_digest: None,
        simulated: false,
        suite_identity: None,
        provider_identity: None,
        suite_repeats: None,
        trust: None,
        references: None,
        seen: None,
    },
    Observed {
        suite_digest: Some("d1"),
        served_model: Some("m1"),
        system_fingerprint: Some("fp1"),
        provider_digest: None,
        simulated: false,
        suite_identity: None,
        provider_identity: None,
        suite_repeats: None,
        trust: None,
        references: None,
        seen: None,
    },
    Observed {
        suite_digest: Some("d2"),
        served_model: Some("m2"),
        system_fingerprint: Some("fp2"),
        provider_digest: None,
        simulated: false,
        suite_identity: None,
        provider_identity: None,
        suite_repeats: None,
        trust: None,
        references: None,
        seen: None,
    },
];

/// What the oracle keeps of one entry of the JSON text.
struct Seen<'a> {
    suite: Option<&'a str>,
    provider: Option<&'a str>,
    unexpired: bool,
    digest: Option<&'a str>,
    served: Option<Vec<Option<&'a str>>>,
    fingerprints: Option<Vec<Option<&'a str>>>,
}

/// The oracle, written against the JSON text rather than the reader's types: the entries
/// of a document whose `format` is v1 and whose `entries` is a list. An entry counts when
/// its suite and provider match, its `valid_until` is an instant after `AT` (compared as
/// integers), and its digest, served models and fingerprints admit what was observed.
fn oracle_entries(doc: Option<&Value>) -> Vec<Seen<'_>> {
    let Some(Value::Object(root)) = doc else {
        return Vec::new();
    };
    if root.get("format") != Some(&Value::String(FORMAT.into())) {
        return Vec::new();
    }
    let Some(Value::Array(entries)) = root.get("entries") else {
        return Vec::new();
    };
    fn list<'a>(e: &'a Value, k: &str) -> Option<Vec<Option<&'a str>>> {
        e.get(k)
            .and_then(Value::as_array)
            .map(|l| l.iter().map(Value::as_str).collect())
    }
    entries
        .iter()
        .map(|e| {
            let text = |k: &str| e.get(k).and_then(Value::as_str);
            Seen {
                suite: text("suite"),
                provider: text("provider"),
                unexpired: text("valid_until")
                    .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
                    .is_some_and(|t| t.unix_timestamp_nanos() > AT.unix_timestamp_nanos()),
                digest: text("suite_digest"),
                served: list(e, "served_models"),
                fingerprints: list(e, "system_fingerprints"),
            }
        })
        .collect()
}

fn oracle(seen: &[Seen<'_>], suite: &str, provider: &str, o: &Observed<'_>) -> bool {
    let admits = |l: &Option<Vec<Option<&str>>>, want: Option<&str>| match want {
        None => true,
        Some(w) => l.as_ref().is_some_and(|l| l.contains(&Some(w))),
    };
    seen.iter().any(|e| {
        e.suite == Some(suite)
            && e.provider == Some(provider)
            && e.unexpired
            && o.suite_digest.is_none_or(|d| e.digest == Some(d))
            && admits(&e.served, o.served_model)
            && admits(&e.fingerprints, o.system_fingerprint)
    })
}

/// Holds the reader to the oracle for every query on `bytes`. With `exact`, the file is
/// known to be well formed, and the reader must also permit whatever the oracle permits.
fn check(bytes: &[u8], exact: bool) -> Result<(), TestCaseError> {
    let list = Allowlist::parse(bytes);
    // A file the reader rejects permits nothing, whatever the oracle would say, so the
    // oracle's parse is only needed when the reader accepted it or must have.
    let doc: Option<Value> = if list.is_ok() || exact {
        serde_json::from_slice(bytes).ok()
    } else {
        None
    };
    let seen = oracle_entries(doc.as_ref());
    for suite in SUITES {
        for provider in PROVIDERS {
            for o in &OBSERVATIONS {
                let expected = oracle(&seen, suite, provider, o);
                // The property is about what the file and the observations say; the
                // evidence's size is held to its bound elsewhere (the decision's tests).
                let decision = match &list {
                    Ok(l) => l.decide_with(suite, provider, AT, o, &Required::default().contract()),
                    Err(d) => Err(d.clone()),
                };
                if let Ok(permit) = &decision {
                    prop_assert!(
                        expected,
                        "permitted {suite}/{provider} with {o:?}, which no valid entry allows:\n{}",
                        String::from_utf8_lossy(bytes)
                    );
                    prop_assert_eq!(&permit.entry.suite, suite);
                    prop_assert_eq!(&permit.entry.provider, provider);
                } else if exact {
                    prop_assert!(
                        !expected,
                        "denied {suite}/{provider} with {o:?} ({:?}), which a valid entry allows",
                        decision.err()
                    );
                }
            }
        }
    }
    Ok(())
}

/// The mutated-file cases are drawn from one seed each: proptest's own strategies for
/// nested documents cost more than the reader under test in a debug build. A failure
/// prints the seed and the bytes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64, so that neighbouring seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn subset(&mut self, pool: &[&str]) -> Vec<Value> {
        pool.iter()
            .filter(|_| self.next() & 1 == 1)
            .map(|s| Value::from(*s))
            .collect()
    }
}

fn instant(rng: &mut Rng) -> String {
    const ODD: [&str; 6] = [
        "2030-01-01T00:00:00.000000001Z",
        "2029-12-31T23:59:59.999999999Z",
        "2030-01-01T01:00:00+02:00",
        "2030-01-01",
        "",
        "9999-12-31T23:59:59Z",
    ];
    if rng.next() & 1 == 0 {
        // Around `AT`, to the second.
        let s = *rng.pick(&[-86_400i64, -1, 0, 1, 86_400]);
        (AT + time::Duration::seconds(s)).format(&Rfc3339).unwrap()
    } else {
        rng.pick(&ODD).to_string()
    }
}

fn entry(rng: &mut Rng) -> Value {
    json!({
        "suite": rng.pick(&SUITES), "provider": rng.pick(&PROVIDERS), "model": "m",
        "served_models": rng.subset(&MODELS), "system_fingerprints": rng.subset(&FINGERPRINTS),
        "suite_digest": rng.pick(&DIGESTS), "provider_digest": "pd", "tokenizer": "none",
        "evidence": {"run_id": "r", "report": "x", "conform_version": "0.1.0",
            "cases": 2, "repeats": 1, "calls": 2, "passed": 2, "pass_rate": 1.0,
            "first_attempt_pass_rate": 0.5, "checks": {"json": {"passed": 2, "failed": 0}}},
        "generated_at": "2029-12-25T00:00:00Z", "valid_until": instant(rng),
    })
}

fn allowlist(rng: &mut Rng) -> Value {
    let n = rng.below(5);
    let entries: Vec<Value> = (0..n).map(|_| entry(rng)).collect();
    json!({"format": FORMAT, "entries": entries, "revocations": []})
}

const ENTRY_KEYS: [&str; 9] = [
    "suite",
    "provider",
    "served_models",
    "system_fingerprints",
    "suite_digest",
    "valid_until",
    "evidence",
    "model",
    "tokenizer",
];

fn odd_value(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => Value::Null,
        1 => json!(7),
        2 => json!(-1),
        3 => json!("s1"),
        4 => json!("p2"),
        5 => json!(["m1", "m2", "m3"]),
        6 => json!([1, 2]),
        7 => json!({}),
        8 => json!("2031-01-01T00:00:00Z"),
        _ => json!(true),
    }
}

/// A change to the parsed document, as a hand edit or another writer's bug might make:
/// a key removed, a key set to an odd value, a top-level field replaced.
fn edit(doc: &mut Value, rng: &mut Rng) {
    let e = rng.below(5);
    let key = *rng.pick(&ENTRY_KEYS);
    match rng.below(3) {
        0 => {
            if let Some(obj) = doc["entries"].get_mut(e).and_then(Value::as_object_mut) {
                obj.remove(key);
            }
        }
        1 => {
            let v = odd_value(rng);
            if let Some(obj) = doc["entries"].get_mut(e).and_then(Value::as_object_mut) {
                obj.insert(key.to_string(), v);
            }
        }
        _ => {
            let v = odd_value(rng);
            let top = *rng.pick(&["format", "entries", "revocations"]);
            if let Some(obj) = doc.as_object_mut() {
                obj.insert(top.to_string(), v);
            }
        }
    }
}

const SPLICES: [&[u8]; 8] = [
    b"\"",
    b"}",
    b"]",
    b",",
    b"\"p1\"",
    b"\\u0000",
    b"null",
    b"{\"suite\":\"s1\",\"provider\":\"p1\",\"valid_until\":\"2031-01-01T00:00:00Z\"},",
];

/// A change to the bytes: a flipped byte, a cut, a deletion, a splice, a duplicated run.
fn mutate(bytes: &mut Vec<u8>, rng: &mut Rng) {
    let len = bytes.len();
    if len == 0 {
        return;
    }
    let at = rng.below(len);
    match rng.below(5) {
        0 => bytes[at] ^= (rng.next() as u8) | 1,
        1 => bytes.truncate(at),
        2 => {
            let n = 1 + rng.below(16);
            bytes.drain(at..(at + n).min(len));
        }
        3 => {
            let piece: Vec<u8> = if rng.next() & 1 == 0 {
                (0..1 + rng.below(3)).map(|_| rng.next() as u8).collect()
            } else {
                rng.pick(&SPLICES).to_vec()
            };
            bytes.splice(at..at, piece);
        }
        _ => {
            let n = 1 + rng.below(64);
            let piece: Vec<u8> = bytes[at..(at + n).min(len)].to_vec();
            bytes.splice(at..at, piece);
        }
    }
}

fn token_soup() -> impl Strategy<Value = Vec<u8>> {
    let tokens: Vec<&'static str> = vec![
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"format\"",
        "\"conform.allowlist/v1\"",
        "\"entries\"",
        "\"suite\"",
        "\"provider\"",
        "\"s1\"",
        "\"p1\"",
        "\"valid_until\"",
        "\"2031-01-01T00:00:00Z\"",
        "\"served_models\"",
        "null",
        "1",
        "\"",
    ];
    prop::collection::vec(prop::sample::select(tokens), 0..48).prop_map(|t| t.concat().into_bytes())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_permit(bytes in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        token_soup(),
    ]) {
        check(&bytes, false)?;
    }

    #[test]
    fn mutated_valid_files_permit_only_what_a_valid_entry_allows(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let mut doc = allowlist(&mut rng);
        // A third of the files stay well formed: then the reader must agree exactly.
        let (edits, mutations) = match rng.below(3) {
            0 => (0, 0),
            _ => (rng.below(3), rng.below(4)),
        };
        for _ in 0..edits {
            edit(&mut doc, &mut rng);
        }
        let mut bytes = if rng.next() & 1 == 0 {
            serde_json::to_vec_pretty(&doc).unwrap()
        } else {
            serde_json::to_vec(&doc).unwrap()
        };
        for _ in 0..mutations {
            mutate(&mut bytes, &mut rng);
        }
        check(&bytes, edits == 0 && mutations == 0)?;
    }
}
