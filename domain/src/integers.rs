//! JSON integers as JSON Schema counts them: `1.0` is the integer 1 (JSON has one number type;
//! Draft 2020-12 calls a number with a zero fractional part an integer), so a body the
//! published document accepts is read the same way here.

use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};

/// The number as an `i64` when it is an integer in JSON Schema's sense and fits.
fn as_i64(n: &Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let f = n.as_f64()?;
    // 2^63 is the first float past i64::MAX; every float below it with no fraction fits.
    (f.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f))
        .then_some(f as i64)
}

/// Rewrites every integral float in `v` (`3.0`) as the integer it is, so typed fields read it.
pub fn normalize(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(i) = as_i64(n) {
                *v = Value::from(i);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        Value::Object(map) => map.values_mut().for_each(normalize),
        _ => {}
    }
}

/// `deserialize_with` for an optional `i64` field that accepts `3.0` as 3 (and refuses `3.5`).
pub fn optional_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    match Option::<Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => as_i64(&n)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("expected an integer, got {n}"))),
    }
}

/// `deserialize_with` for a `u64` field that accepts `3.0` as 3 (and refuses `3.5` and `-1`).
pub fn non_negative<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = Number::deserialize(d)?;
    n.as_u64()
        .or_else(|| as_i64(&n).and_then(|i| u64::try_from(i).ok()))
        .ok_or_else(|| {
            serde::de::Error::custom(format!("expected a non-negative integer, got {n}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integral_floats_are_integers_and_others_are_not() {
        let mut v = json!({"a": 3.0, "b": [1.5, -2.0, 7], "c": "4.0"});
        normalize(&mut v);
        assert_eq!(v, json!({"a": 3, "b": [1.5, -2, 7], "c": "4.0"}));
        #[derive(Deserialize)]
        struct T {
            #[serde(default, deserialize_with = "optional_i64")]
            n: Option<i64>,
        }
        let n = |s: &str| serde_json::from_str::<T>(s).map(|t| t.n);
        assert_eq!(n(r#"{"n": 5.0}"#).unwrap(), Some(5));
        assert_eq!(n(r#"{"n": 5}"#).unwrap(), Some(5));
        assert_eq!(n(r#"{"n": null}"#).unwrap(), None);
        assert_eq!(n(r#"{}"#).unwrap(), None);
        assert!(n(r#"{"n": 5.5}"#).is_err());
        assert!(n(r#"{"n": 1e300}"#).is_err());
    }

    #[test]
    fn non_negative_takes_integral_floats_and_no_negatives() {
        #[derive(Deserialize)]
        struct T {
            #[serde(deserialize_with = "non_negative")]
            n: u64,
        }
        let n = |s: &str| serde_json::from_str::<T>(s).map(|t| t.n);
        assert_eq!(n(r#"{"n": 3.0}"#).unwrap(), 3);
        assert_eq!(n(r#"{"n": 18446744073709551615}"#).unwrap(), u64::MAX);
        assert!(n(r#"{"n": 3.5}"#).is_err());
        assert!(n(r#"{"n": -1}"#).is_err());
        assert!(n(r#"{"n": "3"}"#).is_err());
    }
}
