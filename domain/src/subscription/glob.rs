//! Stream paths and the globs a subscription links streams by.

/// A stream path relative to `/v1/stream/`, without leading or trailing `/`.
pub fn normalize_path(path: &str) -> String {
    path.trim_matches('/').to_string()
}

/// Whether `path` matches the glob `pattern`: segments split on `/`, `*` matches exactly one
/// segment, `**` zero or more, anything else itself (the reference server's rules).
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let split = |s: &str| -> Vec<String> {
        s.split('/')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    };
    fn matches(p: &[String], s: &[String]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((seg, rest)) if seg == "**" => (0..=s.len()).any(|i| matches(rest, &s[i..])),
            Some((seg, rest)) => match s.split_first() {
                Some((first, s_rest)) => (seg == "*" || seg == first) && matches(rest, s_rest),
                None => false,
            },
        }
    }
    matches(&split(pattern), &split(path))
}

/// Why a pattern is not a glob we take: empty segments are fine (dropped), but `*` or `**`
/// inside a segment would silently match nothing.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.trim_matches('/').is_empty() {
        return Err("pattern must name at least one segment".into());
    }
    for seg in pattern.split('/') {
        if seg.contains('*') && seg != "*" && seg != "**" {
            return Err(format!(
                "pattern segment '{seg}': '*' and '**' must be whole segments"
            ));
        }
    }
    Ok(())
}
