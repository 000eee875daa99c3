//! Idempotency keys: racing appends and a claim's life.

use super::*;

fn keyed(key: &str, fingerprint: &str, expires_at: i64) -> KeyedAppend {
    KeyedAppend {
        key: IdempotencyKey {
            scope: "u".into(),
            key: key.into(),
        },
        fingerprint: fingerprint.into(),
        expires_at,
        answer: std::sync::Arc::new(|stored: &[StoredEvent]| {
            let ids: Vec<i64> = stored.iter().map(|e| e.id).collect();
            serde_json::json!({ "ids": ids }).to_string()
        }),
    }
}

/// Many appends under one key, in one process (in one batch, and in a batch decided while one
/// with the key is written): one is stored, with its answer; the others store nothing.
async fn a_keys_racing_appends_store_once(kind: Kind) {
    let (_guard, log) = open_kind(kind).await;
    let far = threadstream_domain::clock::now_ms() + 60_000;
    // Rounds: whether an append arrives while the key's batch is written is up to timing.
    for round in 0..8 {
        let t = format!("t{round}");
        log.append(&t, start("r1")).await.unwrap();
        let appends = (0..40).map(|i| {
            let log = log.clone();
            let t = t.clone();
            // Other keys among them, each stored.
            let key = if i % 4 == 0 {
                format!("other-{round}-{i}")
            } else {
                format!("k{round}")
            };
            // Spread out, so that some arrive while a batch with the key is being written (on
            // Postgres the writer decides them before that batch lands).
            async move {
                tokio::time::sleep(std::time::Duration::from_micros(300 * i)).await;
                log.append_keyed(&t, vec![delta("r1", "x")], keyed(&key, "fp", far))
                    .await
            }
        });
        let results = futures::future::join_all(appends).await;
        let stored = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(
            stored,
            1 + 10,
            "round {round}: one of the key, and each other key"
        );
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, StoreError::KeyAnswered), "round {round}: {e:?}");
            }
        }
        let deltas = log
            .read_thread(&t, 0, 1000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.event_type == "text-delta")
            .count();
        assert_eq!(deltas, 11, "round {round}");
        let key = IdempotencyKey {
            scope: "u".into(),
            key: format!("k{round}"),
        };
        let answer = log
            .key_answer(&key, threadstream_domain::clock::now_ms())
            .await
            .unwrap()
            .expect("the key is answered");
        let winner = results
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 4 != 0)
            .find_map(|(_, r)| r.as_ref().ok())
            .expect("one append of the key stored");
        let ids: Vec<i64> = winner.iter().map(|e| e.id).collect();
        assert_eq!(answer, serde_json::json!({ "ids": ids }).to_string());
    }
}
both_stores!(
    keys_racing_appends_store_once,
    a_keys_racing_appends_store_once
);

/// A claim's life: taken, held against a second claim (of any request), given back, answered,
/// taken over once it ran out, and forgotten once expired.
async fn a_claims_life(kind: Kind) {
    let (_guard, log) = open_kind(kind).await;
    let now = threadstream_domain::clock::now_ms();
    let key = IdempotencyKey {
        scope: "u".into(),
        key: "k".into(),
    };
    let claim = |token: &str, fingerprint: &str, now: i64| KeyClaim {
        key: key.clone(),
        fingerprint: fingerprint.into(),
        token: token.into(),
        now,
        claimed_until: now + 10_000,
        expires_at: now + 60_000,
    };
    assert_eq!(
        log.claim_key(&claim("a", "fp", now)).await.unwrap(),
        Claim::Taken
    );
    let held = Claim::Held {
        fingerprint: "fp".into(),
    };
    assert_eq!(log.claim_key(&claim("b", "fp", now)).await.unwrap(), held);
    assert_eq!(
        log.claim_key(&claim("b", "other", now)).await.unwrap(),
        held
    );
    // Only its holder gives a claim back.
    log.release_key(&key, "b").await.unwrap();
    assert_eq!(log.claim_key(&claim("b", "fp", now)).await.unwrap(), held);
    log.release_key(&key, "a").await.unwrap();
    assert_eq!(
        log.claim_key(&claim("b", "fp", now)).await.unwrap(),
        Claim::Taken
    );
    // Past b's claim, another execution takes the key over.
    let later = now + 10_001;
    assert_eq!(
        log.claim_key(&claim("c", "fp", later)).await.unwrap(),
        Claim::Taken
    );

    log.append("t", start("r1")).await.unwrap();
    let stored = log
        .append_keyed("t", vec![delta("r1", "x")], keyed("k", "fp", now + 60_000))
        .await
        .unwrap();
    let answer = serde_json::json!({ "ids": [stored[0].id] }).to_string();
    let answered = Claim::Answered {
        fingerprint: "fp".into(),
        answer,
    };
    assert_eq!(
        log.claim_key(&claim("d", "fp", later)).await.unwrap(),
        answered
    );
    // An answered key is not given back, nor taken over.
    log.release_key(&key, "c").await.unwrap();
    let much_later = now + 59_000;
    assert_eq!(
        log.claim_key(&claim("d", "fp", much_later)).await.unwrap(),
        answered
    );
    // Expired: forgotten by reads, claims and appends, and pruned.
    let expired = now + 60_001;
    assert_eq!(log.key_answer(&key, expired).await.unwrap(), None);
    assert_eq!(
        log.claim_key(&claim("e", "fp2", expired)).await.unwrap(),
        Claim::Taken
    );
    log.prune_keys(expired + 60_001).await.unwrap();
    assert_eq!(
        log.claim_key(&claim("f", "fp3", expired)).await.unwrap(),
        Claim::Taken
    );
}
both_stores!(claims_life, a_claims_life);
