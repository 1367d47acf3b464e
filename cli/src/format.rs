//! Text helpers of `inspect`'s views: aligned tables, times in UTC, ages.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch now (0 if the clock is before it).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The last millisecond of the year 9999: later times are not dates we
/// print (a node may hold any number).
const MAX_MS: i64 = 253_402_300_799_999;

/// `ms` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`; `None` before 1970
/// or after 9999.
pub(crate) fn utc(ms: i64) -> Option<String> {
    if !(0..=MAX_MS).contains(&ms) {
        return None;
    }
    let (days, rest) = (ms / 86_400_000, ms % 86_400_000);
    // Howard Hinnant's civil_from_days, on days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    ))
}

/// A time read from a node, as [`utc`] or, if it is no date, the number.
pub(crate) fn utc_or_ms(ms: i64) -> String {
    utc(ms).unwrap_or_else(|| format!("{ms} ms"))
}

/// Milliseconds as seconds with one decimal (`1.2s`, `-0.5s`).
pub(crate) fn secs(ms: i64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// How long ago, in the unit that reads best: `12.3s`, `14 min`, `5 h`,
/// `410 days`; negative (a time to come) as seconds.
pub(crate) fn ago(ms: i64) -> String {
    if ms < 120_000 {
        secs(ms)
    } else if ms < 7_200_000 {
        format!("{} min", ms / 60_000)
    } else if ms < 172_800_000 {
        format!("{} h", ms / 3_600_000)
    } else {
        format!("{} days", ms / 86_400_000)
    }
}

/// `header` and `rows` as text, each column as wide as its widest cell
/// (the last one not padded), the columns in `right` aligned right, each
/// line after `indent`.
pub(crate) fn table(
    header: &[&str],
    rows: &[Vec<String>],
    right: &[usize],
    indent: &str,
) -> String {
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut width = vec![0usize; header.len()];
    for line in std::iter::once(&header).chain(rows) {
        for (w, cell) in width.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(&header).chain(rows) {
        let mut text = indent.to_owned();
        for (i, (w, cell)) in width.iter().zip(line).enumerate() {
            if i + 1 == line.len() {
                text.push_str(cell);
            } else if right.contains(&i) {
                text.push_str(&format!("{cell:>w$}  "));
            } else {
                text.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_700_000_000_123).unwrap(), "2023-11-14T22:13:20.123Z");
        assert_eq!(utc(951_782_400_000).unwrap(), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc(MAX_MS).unwrap(), "9999-12-31T23:59:59.999Z");
        assert_eq!(utc(-1), None);
        assert_eq!(utc(MAX_MS + 1), None);
        assert_eq!(utc(i64::MAX), None);
        assert_eq!(utc_or_ms(i64::MIN), format!("{} ms", i64::MIN));
        assert_eq!(ago(-1500), "-1.5s");
        assert_eq!(ago(119_000), "119.0s");
        assert_eq!(ago(600_000), "10 min");
        assert_eq!(ago(7_200_000), "2 h");
        assert_eq!(ago(i64::MAX), format!("{} days", i64::MAX / 86_400_000));
    }

    #[test]
    fn tables_align() {
        let rows = vec![
            vec!["1".to_owned(), "abc".to_owned(), "x".to_owned()],
            vec!["10".to_owned(), "a".to_owned(), "y y".to_owned()],
        ];
        assert_eq!(
            table(&["#", "NAME", "DATA"], &rows, &[0], "  "),
            "   #  NAME  DATA\n   1  abc   x\n  10  a     y y\n"
        );
    }
}
