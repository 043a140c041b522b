//! Small statistics shared by the probe and the lab.

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        sorted[n / 2 - 1] / 2.0 + sorted[n / 2] / 2.0
    }
}

/// The `p`th percentile of `values`, nearest rank; NaN when empty.
pub fn percentile(values: &[f64], p: u32) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (f64::from(p) / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::{median, percentile};

    #[test]
    fn nearest_rank_percentiles() {
        assert!(percentile(&[], 50).is_nan());
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50), 10.0);
        assert_eq!(percentile(&v, 95), 19.0);
        assert_eq!(percentile(&v, 100), 20.0);
        assert_eq!(percentile(&[7.0], 95), 7.0);
    }

    #[test]
    fn medians() {
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[5.0]), 5.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0]), 1.5);
        assert_eq!(median(&[f64::MAX, f64::MAX]), f64::MAX);
    }
}
