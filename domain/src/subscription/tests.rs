use super::*;

fn config(kind: SubscriptionType) -> SubscriptionConfig {
    SubscriptionConfig {
        kind,
        pattern: Some("events/*".into()),
        streams: vec![],
        webhook_url: Some("http://127.0.0.1:1/hook".into()),
        wake_stream: None,
        lease_ttl_ms: 1_000,
        description: None,
    }
}

/// Decides and applies `c` at `now`, the next events numbered after `*last`.
fn run(
    s: &mut Subscriptions,
    last: &mut i64,
    now: i64,
    c: &SubscriptionCommand,
) -> Result<Vec<EventBody>, SubscriptionRefusal> {
    let events = s.decide(c, "u", now)?;
    for e in &events {
        *last += 1;
        s.apply(*last, now, e);
    }
    Ok(events)
}

fn tails(path: &str, tail: i64) -> BTreeMap<String, i64> {
    BTreeMap::from([(path.to_string(), tail)])
}

#[test]
fn globs_match_segments() {
    assert!(glob_match("events/*", "events/a"));
    assert!(!glob_match("events/*", "events/a/b"));
    assert!(!glob_match("events/*", "events"));
    assert!(glob_match("events/**", "events"));
    assert!(glob_match("events/**", "events/a/b"));
    assert!(glob_match("**/b", "x/y/b"));
    assert!(!glob_match("other/*", "events/a"));
    assert!(check_pattern("events/*").is_ok());
    assert!(check_pattern("events/a*").is_err());
    assert!(check_pattern("/").is_err());
}

#[test]
fn create_is_idempotent_and_another_users_id_is_not_there() {
    let (mut s, mut last) = (Subscriptions::default(), 0);
    let create = SubscriptionCommand::Create {
        id: "s".into(),
        config: config(SubscriptionType::Webhook),
        callback_base: "http://127.0.0.1:1".into(),
    };
    run(&mut s, &mut last, 0, &create).unwrap();
    assert_eq!(s.decide(&create, "u", 0), Err(SubscriptionRefusal::Exists));
    assert_eq!(
        s.decide(&create, "other", 0),
        Err(SubscriptionRefusal::NotFound)
    );
    let mut changed = config(SubscriptionType::Webhook);
    changed.lease_ttl_ms = 2_000;
    assert_eq!(
        s.decide(
            &SubscriptionCommand::Create {
                id: "s".into(),
                config: changed,
                callback_base: "http://127.0.0.1:1".into(),
            },
            "u",
            0
        ),
        Err(SubscriptionRefusal::ConfigMismatch)
    );
}

/// A wake begins on pending messages, acks move the cursor, `done` ends it and fences its
/// generation; a lease that runs out lets the next wake begin.
#[test]
fn wakes_ack_fence_and_expire() {
    let (mut s, mut last) = (Subscriptions::default(), 10);
    let id = "s".to_string();
    run(
        &mut s,
        &mut last,
        0,
        &SubscriptionCommand::Create {
            id: id.clone(),
            config: config(SubscriptionType::Webhook),
            callback_base: String::new(),
        },
    )
    .unwrap();
    let link = SubscriptionCommand::Link {
        id: id.clone(),
        streams: vec!["events/a".into()],
        explicit: false,
    };
    run(&mut s, &mut last, 0, &link).unwrap();
    assert_eq!(s.by_id[&id].links["events/a"].acked, 11, "from creation");
    assert!(run(&mut s, &mut last, 0, &link).unwrap().is_empty());
    let wake = |w: &str, tail| SubscriptionCommand::Wake {
        id: id.clone(),
        wake_id: w.into(),
        tails: tails("events/a", tail),
        stream: "events/a".into(),
    };
    assert_eq!(
        s.decide(&wake("w0", 11), "u", 0),
        Err(SubscriptionRefusal::NothingToWake)
    );
    run(&mut s, &mut last, 0, &wake("w1", 20)).unwrap();
    assert_eq!(
        s.decide(&wake("w2", 20), "u", 500),
        Err(SubscriptionRefusal::NothingToWake),
        "a wake is live"
    );
    let ack = |generation, offset, done| SubscriptionCommand::Ack {
        id: id.clone(),
        via: SubscriptionType::Webhook,
        generation,
        wake_id: "w1".into(),
        acks: vec![StreamAck {
            stream: "events/a".into(),
            offset,
        }],
        done,
        tails: tails("events/a", 20),
    };
    assert!(matches!(
        s.decide(&ack(1, 21, false), "u", 10),
        Err(SubscriptionRefusal::InvalidOffset(_))
    ));
    assert_eq!(
        s.decide(&ack(2, 20, true), "u", 10),
        Err(SubscriptionRefusal::Fenced)
    );
    run(&mut s, &mut last, 10, &ack(1, 20, true)).unwrap();
    assert_eq!(s.by_id[&id].links["events/a"].acked, 20);
    assert_eq!(
        s.decide(&ack(1, 20, true), "u", 20),
        Err(SubscriptionRefusal::Fenced),
        "a finished wake is fenced"
    );
    // A new message: generation 2, whose lease runs out unacked; generation 3 follows.
    run(&mut s, &mut last, 100, &wake("w2", 30)).unwrap();
    assert_eq!(s.by_id[&id].generation, 2);
    assert_eq!(
        s.decide(&wake("w3", 30), "u", 1_099),
        Err(SubscriptionRefusal::NothingToWake)
    );
    run(&mut s, &mut last, 1_100, &wake("w3", 30)).unwrap();
    assert_eq!(s.by_id[&id].generation, 3);
}

#[test]
fn pull_wake_claims_are_exclusive_until_released() {
    let (mut s, mut last) = (Subscriptions::default(), 0);
    let id = "p".to_string();
    let mut cfg = config(SubscriptionType::PullWake);
    cfg.streams = vec!["events/a".into()];
    cfg.webhook_url = None;
    cfg.wake_stream = Some("wake/pool".into());
    run(
        &mut s,
        &mut last,
        0,
        &SubscriptionCommand::Create {
            id: id.clone(),
            config: cfg,
            callback_base: String::new(),
        },
    )
    .unwrap();
    let claim = |worker: &str, tail| SubscriptionCommand::Claim {
        id: id.clone(),
        worker: worker.into(),
        wake_id: "w1".into(),
        tails: tails("events/a", tail),
    };
    assert_eq!(
        s.decide(&claim("a", 1), "u", 0),
        Err(SubscriptionRefusal::NoPendingWork)
    );
    let events = run(&mut s, &mut last, 0, &claim("a", 5)).unwrap();
    assert_eq!(events.len(), 2, "woken and claimed");
    assert_eq!(
        s.decide(&claim("b", 5), "u", 10),
        Err(SubscriptionRefusal::AlreadyClaimed {
            holder: "a".into(),
            generation: 1
        })
    );
    let release = SubscriptionCommand::Release {
        id: id.clone(),
        generation: 1,
        wake_id: "w1".into(),
    };
    run(&mut s, &mut last, 10, &release).unwrap();
    assert_eq!(
        s.decide(&release, "u", 10),
        Err(SubscriptionRefusal::Fenced)
    );
    let events = run(&mut s, &mut last, 20, &claim("b", 5)).unwrap();
    assert_eq!(events.len(), 2, "a new wake for the pending messages");
    assert_eq!(s.by_id[&id].generation, 2);
}
