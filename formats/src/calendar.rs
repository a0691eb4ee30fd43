//! The proleptic Gregorian calendar over every day a value can name. PostgreSQL's dates reach
//! 5874897 AD and its timestamps 294276 AD, past the ±262,143 years `chrono` holds: those
//! were written as a bare day or microsecond count, which reads back as no date at all.
//! Days and civil dates convert as in Howard Hinnant's `days_from_civil`/`civil_from_days`.

/// Days in 400 Gregorian years.
const ERA_DAYS: i64 = 146_097;
/// Days from 0000-03-01 to 1970-01-01.
const EPOCH_SHIFT: i64 = 719_468;

/// The year, month and day of `days` since 1970-01-01.
pub(crate) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + EPOCH_SHIFT;
    let era = z.div_euclid(ERA_DAYS);
    let doe = z.rem_euclid(ERA_DAYS);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a civil date; `None` if there is no such date.
pub(crate) fn days(year: i64, month: u32, day: u32) -> Option<i64> {
    if !(1..=12).contains(&month) || day == 0 {
        return None;
    }
    let y = year.checked_sub(i64::from(month <= 2))?;
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era.checked_mul(ERA_DAYS)?.checked_add(doe - EPOCH_SHIFT)?;
    // A day past the month's end lands in the next month.
    (civil(days) == (year, month, day)).then_some(days)
}

/// `YYYY-MM-DD` of `days` since 1970-01-01, the year as ISO 8601 (and `chrono`'s `%Y`) writes
/// it: four digits at least, with a sign when outside 0000–9999.
pub(crate) fn date_text(days: i64) -> String {
    let (year, month, day) = civil(days);
    let year = match year {
        0..=9999 => format!("{year:04}"),
        10_000.. => format!("+{year}"),
        _ => format!("-{:04}", year.unsigned_abs()),
    };
    format!("{year}-{month:02}-{day:02}")
}

/// Reads what [`date_text`] writes (a year without its sign too, as PostgreSQL prints one past
/// 9999), as days since 1970-01-01.
pub(crate) fn parse_date(s: &str) -> Option<i64> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'-' => (-1, &s[1..]),
        b'+' => (1, &s[1..]),
        _ => (1, s),
    };
    let mut parts = rest.split('-');
    let (year, month, day) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some()
        || !(digits(year) && digits(month) && digits(day))
        || year.len() < 4
        || (month.len(), day.len()) != (2, 2)
    {
        return None;
    }
    days(
        sign * year.parse::<i64>().ok()?,
        month.parse().ok()?,
        day.parse().ok()?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where chrono holds the date, the text is chrono's, and both directions agree.
    #[test]
    fn dates_are_written_as_chrono_writes_them_and_read_back() {
        let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
        let mut day = -95_000_000i64; // about 260,000 years before 1970
        while day < 95_000_000 {
            let ours = date_text(day);
            let theirs = (epoch + chrono::TimeDelta::days(day))
                .format("%Y-%m-%d")
                .to_string();
            assert_eq!(ours, theirs, "day {day}");
            assert_eq!(parse_date(&ours), Some(day), "{ours}");
            day += 7_919; // a prime stride: every month, leap days among them
        }
    }

    #[test]
    fn every_day_an_i32_names_reads_back() {
        for day in [i64::from(i32::MIN), -1, 0, 59, 60, i64::from(i32::MAX)] {
            assert_eq!(parse_date(&date_text(day)), Some(day), "{}", date_text(day));
        }
        // PostgreSQL's last date, as it prints it and as ISO 8601 does.
        let last = parse_date("5874897-12-31").unwrap();
        assert_eq!(date_text(last), "+5874897-12-31");
        assert_eq!(parse_date("+5874897-12-31"), Some(last));
    }

    #[test]
    fn what_is_no_date_is_refused() {
        for text in [
            "2023-02-29",
            "2024-13-01",
            "2024-00-10",
            "2024-01-32",
            "24-01-01",
            "2024-1-01",
            "",
            "x",
            "2024-01-01-01",
        ] {
            assert_eq!(parse_date(text), None, "{text}");
        }
        assert_eq!(parse_date("2024-02-29"), Some(19_782));
    }
}
