//! Exact conversion of trace timestamps to nanoseconds, and the bounds a timestamp must respect.
//!
//! Kineto writes `ts` and `dur` in microseconds as JSON numbers, absolute UNIX microseconds with a
//! nanosecond fraction (`1712195495519689.047`) in some versions. Going through `f64` loses up to
//! ±125 ns at that magnitude, so the number's decimal text is converted with integer arithmetic.
use anyhow::{bail, Result};

/// 2000-01-01T00:00:00Z and 2100-01-01T00:00:00Z in ns: a UTC time outside is not a trace time
/// (a ts of 1e17 µs would be the year 5138; a base near i64::MAX the year 2262).
pub const EARLIEST_UTC_NS: i64 = 946_684_800_000_000_000;
pub const LATEST_UTC_NS: i64 = 4_102_444_800_000_000_000;

/// Microseconds given as JSON number text (`12`, `-3.5`, `1712195495519689.047`, `1.7e15`)
/// to nanoseconds, rounded half away from zero. Fails on anything that is not a JSON number or
/// does not fit in i64 nanoseconds.
pub fn micros_text_to_ns(text: &str) -> Result<i64> {
    let t = text.trim();
    let (negative, unsigned) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => {
            let exp: i32 = unsigned[i + 1..]
                .trim_start_matches('+')
                .parse()
                .map_err(|_| anyhow::anyhow!("{t:?} is not a number"))?;
            (&unsigned[..i], exp)
        }
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        bail!("{t:?} is not a number");
    }
    // All digits as one integer, and the power of ten that scales it to nanoseconds
    // (microseconds → +3).
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    let scale = 3 + exponent - fraction.len() as i32;
    if digits.is_empty() {
        return Ok(0);
    }
    let out_of_range =
        || anyhow::anyhow!("{t} µs is out of range (outside 2000..2100 and any duration)");
    // Digits at or above the nanosecond place; the first digit below it decides the rounding.
    let above_ns = digits.len() as i32 + scale;
    if above_ns > 20 {
        return Err(out_of_range());
    }
    let keep = above_ns.clamp(0, digits.len() as i32) as usize;
    let mut ns: i128 = 0;
    for b in digits[..keep].bytes() {
        ns = ns * 10 + i128::from(b - b'0');
    }
    if scale > 0 {
        ns *= 10i128.pow(scale as u32);
    }
    if above_ns >= 0 && keep < digits.len() && digits.as_bytes()[keep] >= b'5' {
        ns += 1;
    }
    let ns = if negative { -ns } else { ns };
    i64::try_from(ns).map_err(|_| out_of_range())
}

/// Checks that a UTC timestamp is in the range any trace can have.
pub fn check_utc(ns: i64, what: &str) -> Result<()> {
    if !(EARLIEST_UTC_NS..LATEST_UTC_NS).contains(&ns) {
        bail!(
            "{what} is {} — outside 2000..2100, so not a trace time",
            describe_utc(ns)
        );
    }
    Ok(())
}

fn describe_utc(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns)
        .format("%Y-%m-%dT%H:%M:%S%.9fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_nanoseconds_at_unix_magnitude() {
        assert_eq!(
            micros_text_to_ns("1712195495519689.047").unwrap(),
            1_712_195_495_519_689_047
        );
        // f64 would give ...689_046_875 rounded; the exact text conversion keeps every digit.
        assert_eq!(
            micros_text_to_ns("1712195495519689.999").unwrap(),
            1_712_195_495_519_689_999
        );
        assert_eq!(
            micros_text_to_ns("4458676524595.135").unwrap(),
            4_458_676_524_595_135
        );
    }

    #[test]
    fn small_fractions_integers_and_exponents() {
        assert_eq!(micros_text_to_ns("0").unwrap(), 0);
        assert_eq!(micros_text_to_ns("12").unwrap(), 12_000);
        assert_eq!(micros_text_to_ns("12.345678").unwrap(), 12_346);
        assert_eq!(micros_text_to_ns("12.3454").unwrap(), 12_345);
        assert_eq!(micros_text_to_ns("0.0005").unwrap(), 1);
        assert_eq!(micros_text_to_ns("0.0004").unwrap(), 0);
        assert_eq!(micros_text_to_ns("0.00000001").unwrap(), 0);
        assert_eq!(micros_text_to_ns("-3.5").unwrap(), -3_500);
        assert_eq!(
            micros_text_to_ns("1.7e15").unwrap(),
            1_700_000_000_000_000_000
        );
        assert_eq!(micros_text_to_ns("2.5E-1").unwrap(), 250);
        assert_eq!(micros_text_to_ns("007.25").unwrap(), 7_250);
    }

    #[test]
    fn not_numbers_and_overflow_are_errors() {
        for bad in ["", "-", "soon", "\"12\"", "1.2.3", "1e", "12a", ".5"] {
            assert!(micros_text_to_ns(bad).is_err(), "{bad}");
        }
        assert!(micros_text_to_ns("1e15").is_ok());
        assert!(
            micros_text_to_ns("1e17").is_err(),
            "1e20 ns does not fit in i64"
        );
        assert!(micros_text_to_ns("99999999999999999999999").is_err());
    }

    #[test]
    fn utc_bounds() {
        assert!(check_utc(1_700_000_000_000_000_000, "ts").is_ok());
        let err = check_utc(i64::MAX - 5, "base").unwrap_err().to_string();
        assert!(err.contains("2262"), "{err}");
        assert!(check_utc(0, "ts").is_err());
    }
}
