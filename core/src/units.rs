//! Human-readable durations ("7d", "250ms") and sizes ("512MiB", "1GB") for configuration.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written for humans: `"250ms"`, `"30s"`, `"5m"`, `"7d"`, `"1h 30m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct HumanDuration(pub Duration);

impl std::str::FromStr for HumanDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        humantime::parse_duration(s.trim()).map(HumanDuration).map_err(|e| {
            format!("invalid duration {s:?} ({e}); write a number and a unit, e.g. \"250ms\", \"30s\", \"5m\", \"2h\", \"7d\"")
        })
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A size in bytes written for humans: `"512MiB"`, `"1GB"`, `"64KiB"`, `"4096"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

const UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
];

impl std::str::FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "invalid size {s:?}; write a number and a unit, e.g. \"512MiB\", \"10GB\", \"64KiB\" (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            )
        };
        let t = s.trim();
        let split = t
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let num: f64 = num.parse().map_err(|_| bad())?;
        let unit = unit.trim().to_ascii_lowercase();
        let mult = if unit.is_empty() {
            1
        } else {
            UNITS
                .iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, m)| *m)
                .ok_or_else(bad)?
        };
        let bytes = num * mult as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
            return Err(bad());
        }
        Ok(ByteSize(bytes.round() as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, m) in [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ] {
            if b >= m && b.is_multiple_of(m) {
                return write!(f, "{}{unit}", b / m);
            }
        }
        if b >= 1 << 20 {
            return write!(f, "{:.1}MiB", b as f64 / (1u64 << 20) as f64);
        }
        write!(f, "{b}B")
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ok(ByteSize(n)),
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!("512MiB".parse::<ByteSize>().unwrap().0, 512 << 20);
        assert_eq!("1GB".parse::<ByteSize>().unwrap().0, 1_000_000_000);
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
        assert_eq!("1.5 KiB".parse::<ByteSize>().unwrap().0, 1536);
        assert!(
            "12 parsecs"
                .parse::<ByteSize>()
                .unwrap_err()
                .contains("MiB")
        );
        assert!("".parse::<ByteSize>().is_err());
    }

    #[test]
    fn parses_durations() {
        assert_eq!(
            "7d".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(
            "250ms".parse::<HumanDuration>().unwrap().0,
            Duration::from_millis(250)
        );
        assert!(
            "soon"
                .parse::<HumanDuration>()
                .unwrap_err()
                .contains("\"30s\"")
        );
    }

    #[test]
    fn sizes_display_round_trip() {
        for s in ["512MiB", "1GiB", "3KiB", "17B"] {
            assert_eq!(s.parse::<ByteSize>().unwrap().to_string(), s);
        }
    }
}
