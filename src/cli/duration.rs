//! `--duration` values: `500ms`, `3s`, `2m`, `1h`; a bare number is seconds, as for timeout(1).

use std::time::Duration;

pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; use e.g. 500ms, 3s, 2m or 1h"))?;
    let scale = match unit {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}`; use ms, s, m or h"
            ))
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("`{text}` is too long"));
    }
    if secs <= 0.0 {
        return Err(format!("`{text}`: a duration must be greater than zero (leave --duration out to run until interrupted)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("1.5").unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn rejects_zero_and_garbage() {
        for bad in ["0", "0s", "", "abc", "3x", "-1s", "1e999"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
