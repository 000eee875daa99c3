//! The read models the projector keeps, listed once ([`read_models!`]), and their names
//! ([`MODELS`]).
//!
//! A file of its own, which imports nothing of the crate: the projector
//! ([`super::projector`]) folds every model of the list, and `crate::metrics` reports each one's
//! lag, without either importing the other.

/// Every read model, listed once. `read_models!(names)` is their names; `read_models!(M =>
/// { … })` runs the block once per model, with `M` standing for its type.
macro_rules! read_models {
    (@list [$($m:ty),*] names) => {
        &[$(<$m as threadstream_projections::ReadModel>::NAME),*]
    };
    (@list [$($m:ty),*] $alias:ident => $body:block) => { $( { type $alias = $m; $body } )* };
    ($($rest:tt)*) => {
        read_models!(@list [
            threadstream_projections::History,
            threadstream_projections::Status,
            threadstream_projections::ThreadList,
            threadstream_projections::Analytics
        ] $($rest)*)
    };
}

pub(crate) use read_models;

/// Names of every read model, for `projections rebuild` and reports.
pub const MODELS: &[&str] = read_models!(names);
