//! A fresh Postgres database per run on the machine's Postgres.

use anyhow::Context;
use sqlx::{Connection, PgConnection};

/// Creates database `<prefix>_<pid>_<millis>` next to the one `admin_url` names and returns its
/// URL and name.
pub async fn create_db(admin_url: &str, prefix: &str) -> anyhow::Result<(String, String)> {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let name = format!("{prefix}_{}_{millis}", std::process::id());
    let mut conn = PgConnection::connect(admin_url)
        .await
        .with_context(|| format!("cannot connect to Postgres at {admin_url}"))?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    let mut url = reqwest::Url::parse(admin_url)?;
    url.set_path(&format!("/{name}"));
    Ok((url.to_string(), name))
}

/// Drops a database made by [`create_db`] (closing whatever is still connected).
pub async fn drop_db(admin_url: &str, name: &str) {
    if std::env::var_os("BENCH_KEEP_DB").is_some() {
        eprintln!("  keeping database {name} (BENCH_KEEP_DB)");
        return;
    }
    if let Ok(mut conn) = PgConnection::connect(admin_url).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
    }
}
