//! Ids the service mints for things the protocols give no format of its own.

/// `prefix_<uuid v7>`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}
