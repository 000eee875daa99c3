//! The webhook signing key's row beside the log.

use super::*;

/// The webhook signing key: the first seed offered is kept, every later offer (another
/// instance, a restart) reads it back, and reopening the store keeps it.
async fn the_first_signing_seed_offered_is_kept(kind: Kind) {
    let (_guard, log) = open_kind(kind).await;
    assert_eq!(log.signing_seed("aa").await.unwrap(), "aa");
    assert_eq!(log.signing_seed("bb").await.unwrap(), "aa");
    let racing = (0..8).map(|i| {
        let log = log.clone();
        async move { log.signing_seed(&format!("c{i}")).await.unwrap() }
    });
    for seed in futures::future::join_all(racing).await {
        assert_eq!(seed, "aa");
    }
}
both_stores!(signing_seed, the_first_signing_seed_offered_is_kept);
