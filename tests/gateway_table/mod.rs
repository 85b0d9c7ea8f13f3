//! docs/gateways.md's "Results per pinned version" table, read as data: the verdict each
//! pinned gateway gives in each scenario. The table is what users read, so it is the one
//! statement of today's results; `tests/gateways.rs` holds every pinned version to it.

use std::collections::BTreeMap;

/// The heading the table follows in docs/gateways.md.
const HEADING: &str = "### Results per pinned version";

/// A gateway's column: by scenario, whether it fails today.
pub type Column = BTreeMap<String, bool>;

/// The table in `doc`: by column header (`LiteLLM 1.108.7`), each scenario's verdict. A
/// row's first cell names its scenarios in backticks, each in full; a verdict cell starts
/// with `pass` or `**fail**`. A row that names no scenario (`revoked candidate`) is a note.
pub fn read(doc: &str) -> Result<BTreeMap<String, Column>, String> {
    let start = doc
        .find(HEADING)
        .ok_or_else(|| format!("no {HEADING:?} section"))?;
    let mut rows = doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(cells);
    let header = rows.next().ok_or("the table has no header")?;
    let gateways: Vec<String> = header.into_iter().skip(1).collect();
    let mut table: BTreeMap<String, Column> = (gateways.iter())
        .map(|g| (g.clone(), Column::new()))
        .collect();
    for (line, row) in rows.enumerate().skip(1) {
        let names = names(&row[0]);
        if names.is_empty() {
            continue;
        }
        if row.len() != gateways.len() + 1 {
            return Err(format!(
                "row {}: {} cells, want {}",
                line + 2,
                row.len(),
                gateways.len() + 1
            ));
        }
        for (gateway, cell) in gateways.iter().zip(&row[1..]) {
            let fails = verdict(cell).map_err(|e| format!("{}, {gateway}: {e}", row[0]))?;
            for name in &names {
                if table[gateway].contains_key(name) {
                    return Err(format!("{name} has two rows"));
                }
                table
                    .get_mut(gateway)
                    .map(|c| c.insert(name.clone(), fails));
            }
        }
    }
    Ok(table)
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The scenario names a first cell holds: every backticked word.
fn names(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn verdict(cell: &str) -> Result<bool, String> {
    if cell.starts_with("**fail**") {
        Ok(true)
    } else if cell.starts_with("pass") {
        Ok(false)
    } else {
        Err(format!(
            "{cell:?} starts with neither `pass` nor `**fail**`"
        ))
    }
}
