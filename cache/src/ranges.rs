//! Merging resident segments into time ranges for the scheduler.

/// Sorts `spans` (start, end) and merges those whose gap to the previous range is at most
/// `max_gap_ms` (overlaps always merge). Segments are keyframe-aligned and back to back, so
/// their boundaries rarely meet exactly: the gap tolerance lets the scheduler see "this node
/// holds 10:00:00–10:02:00 of camera 7" instead of thirty 4-second pieces.
pub(crate) fn merge(mut spans: Vec<(i64, i64)>, max_gap_ms: i64) -> Vec<(i64, i64)> {
    spans.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        // A value reporting an end before its start is a bug upstream; keep the key visible
        // as an empty range rather than inventing a length.
        let end = end.max(start);
        match out.last_mut() {
            Some(last) if start.saturating_sub(last.1) <= max_gap_ms => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn merges_adjacent_and_overlapping_splits_on_gaps() {
        let spans = vec![
            (8_000, 12_000),
            (0, 4_000),
            (4_000, 8_000),
            (20_000, 24_000),
        ];
        assert_eq!(merge(spans, 0), vec![(0, 12_000), (20_000, 24_000)]);
        let spans = vec![(0, 4_000), (4_050, 8_000), (7_000, 9_000)];
        assert_eq!(merge(spans.clone(), 0), vec![(0, 4_000), (4_050, 9_000)]);
        assert_eq!(merge(spans, 100), vec![(0, 9_000)]);
    }

    #[test]
    fn empty_and_inverted() {
        assert!(merge(vec![], 0).is_empty());
        assert_eq!(merge(vec![(10, 5)], 0), vec![(10, 10)]);
    }
}
