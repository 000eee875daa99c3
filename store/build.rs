//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds the
//! migration folders at compile time, and cargo does not know it reads them (sqlx's documented
//! remedy, `sqlx migrate build-script`, writes this).
fn main() {
    for dir in ["../migrations/postgres", "../migrations/sqlite"] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
