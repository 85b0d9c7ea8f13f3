//! Reports out, from `results.jsonl` (streamed during the run, [`crate::results`]):
//! `report.json` (written at the end by streaming the results back, so memory stays
//! flat), `junit.xml` for CI test reporters, `summary.md` for a CI job summary,
//! `report.html` for people, and the terminal summary with a progress display.

pub mod cost;
pub mod differential;
pub mod evidence;
pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod terminal;
