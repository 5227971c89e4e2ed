//! RFC 3339 UTC timestamps with microseconds, formatted by hand from `SystemTime`.
//!
//! A date library would be a dependency for one line of output; the conversion from days to a
//! civil date is Howard Hinnant's `civil_from_days`, exact for the whole proleptic Gregorian
//! calendar.

use std::time::{SystemTime, UNIX_EPOCH};

/// `ts` for a row written now, e.g. `2025-03-01T12:34:56.123456Z`.
pub fn now() -> String {
    format(SystemTime::now())
}

/// Formats `t` as RFC 3339 in UTC with six fractional digits. Times before 1970 (a clock set
/// far back) are written as they are, with a negative offset from the epoch folded in.
pub fn format(t: SystemTime) -> String {
    let (secs, micros) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_micros()),
        Err(e) => {
            // Before the epoch: step back whole seconds so the fraction stays positive.
            let d = e.duration();
            let micros = d.subsec_micros();
            let secs = -(d.as_secs() as i64) - i64::from(micros > 0);
            (secs, if micros > 0 { 1_000_000 - micros } else { 0 })
        }
    };
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Year, month (1-12) and day (1-31) of the day `z` days after 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64, micros: u32) -> String {
        format(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros.into()))
    }

    #[test]
    fn known_instants() {
        // Expected values from `date -u -d @SECS +%FT%T`.
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(at(1_709_251_199, 999_999), "2024-02-29T23:59:59.999999Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000000Z");
        assert_eq!(at(1_735_689_599, 500_000), "2024-12-31T23:59:59.500000Z");
    }

    #[test]
    fn before_epoch() {
        let t = UNIX_EPOCH - Duration::from_micros(1);
        assert_eq!(format(t), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn now_is_well_formed() {
        let s = now();
        assert_eq!(s.len(), "1970-01-01T00:00:00.000000Z".len(), "{s}");
        assert!(s.ends_with('Z') && s.as_bytes()[10] == b'T', "{s}");
    }
}
