//! One subscriber of a thread's stream: the pages it reads from the thread's feed, the frames it
//! renders from them, and the pace it hands them to the connection at.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use threadstream_store::{Page, TailEvent, ThreadFeed};

use super::SseRender;
use crate::access::authorize_thread_read;
use crate::extract::Caller;
use crate::limits::SseSlot;
use crate::ApiContext;

/// Events read per page.
pub(super) const PAGE: usize = 512;
/// Events per page for a subscriber that does not keep up (see `frames`).
const SLOW_PAGE: usize = 32;
/// A hand-over that waits longer than this marks the subscriber as slow.
const SLOW_SEND: Duration = Duration::from_millis(20);
/// Bytes handed to the response body at a time (see `frames`).
const SEND_SLICE: usize = 16 * 1024;
/// An idle subscriber re-reads the store this often: a head hint from another process can be
/// lost.
const RECHECK: Duration = Duration::from_secs(1);

/// The frames of one subscriber: `prelude`, then `renderer`'s frames of the thread's events
/// after `cursor`, until the renderer ends the stream, the client goes away or the server shuts
/// down. One cursor over the log ([`threadstream_store::ThreadFeed`]: the thread's hot tail
/// when it provably covers the cursor, else the store): no replay/live seam. On shutdown the
/// stream first sends what is committed up to then (the runs' `run-finish` of the shutdown
/// included), then ends cleanly; the client resumes elsewhere with its `Last-Event-ID`. `slot`
/// (the stream's place in the SSE limits) is given back when the response body is dropped.
///
/// The stream is polled by the connection itself (no task, no channel): hyper asks for the
/// next bytes only when its write buffer has room, so a slow client holds back the reading,
/// and dropping the body (the client went away) drops the subscriber with everything it holds.
///
/// `caller` was authorized before the stream opened, but a thread that did not exist then had
/// no owner to check: before the first events are sent, read access is checked again, and a
/// thread that turned out to be someone else's ends the stream with nothing sent.
pub fn frames<R: SseRender>(
    ctx: &ApiContext,
    caller: &Caller,
    slot: SseSlot,
    thread_id: String,
    cursor: i64,
    prelude: String,
    renderer: R,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    let subscriber = Subscriber {
        feed: ctx.log.feed(&thread_id, cursor),
        ctx: ctx.clone(),
        caller: caller.clone(),
        thread_id,
        prelude: (!prelude.is_empty()).then(|| Bytes::from(prelude)),
        renderer,
        shutdown: ctx.shutdown.clone(),
        closing: false,
        owner_checked: false,
        next_ping: tokio::time::Instant::now() + ctx.config.sse_ping,
        woke_at: tokio::time::Instant::now(),
        timer: Box::pin(tokio::time::sleep(RECHECK.min(ctx.config.sse_ping))),
        page_size: PAGE,
        pending: Pending::Nothing,
        page_in_hand: false,
        slow: false,
        handed_at: None,
        ended: false,
        _slot: slot,
    };
    futures::stream::unfold(subscriber, |mut s| async move {
        let bytes = s.next_bytes().await?;
        Some((Ok(bytes), s))
    })
}

/// What a subscriber has read and not yet handed over.
enum Pending {
    Nothing,
    /// Rendered frames of a store page (the page itself is dropped once rendered).
    Frames(Bytes),
    /// Tail events, shared with the thread's other subscribers: rendered (or copied) a slice at
    /// a time as the connection asks for bytes, each let go of once it is.
    Tail(VecDeque<Arc<TailEvent>>),
}

/// One SSE subscriber's state between the pieces of its body.
struct Subscriber<R> {
    feed: ThreadFeed,
    ctx: ApiContext,
    caller: Caller,
    thread_id: String,
    prelude: Option<Bytes>,
    renderer: R,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// A shutdown began: read to the head once more, then end.
    closing: bool,
    /// The owner of a thread never changes: one check once it has events is enough.
    owner_checked: bool,
    next_ping: tokio::time::Instant,
    /// When the thread's head last woke it (or the store was last re-checked).
    woke_at: tokio::time::Instant,
    /// Fires at the next ping or store re-check, whichever is first. One timer for the stream,
    /// re-armed only when it fires: a fresh one at every wake-up cost two timer-wheel updates
    /// per delivered event (docs/performance.md, "Cost per token at model speed").
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    page_size: usize,
    pending: Pending,
    /// The last page read is not all handed over yet (or was just finished).
    page_in_hand: bool,
    /// Some piece of the page in hand waited over [`SLOW_SEND`] to be taken.
    slow: bool,
    /// When the last piece was handed to the connection.
    handed_at: Option<tokio::time::Instant>,
    /// The renderer ended the stream: hand over what is pending, then end.
    ended: bool,
    _slot: SseSlot,
}

impl<R: SseRender> Subscriber<R> {
    /// The next piece of the body; `None` ends it.
    async fn next_bytes(&mut self) -> Option<Bytes> {
        // The connection asks for more only when its buffer has room: a piece that waited long
        // to be taken means a slow reader (see the end of a page below).
        if let Some(at) = self.handed_at.take() {
            self.slow |= at.elapsed() > SLOW_SEND;
        }
        if let Some(prelude) = self.prelude.take() {
            return Some(self.hand_over(prelude));
        }
        loop {
            if let Some(piece) = self.next_piece() {
                return Some(self.hand_over(piece));
            }
            if self.ended {
                return None;
            }
            if std::mem::take(&mut self.page_in_hand) {
                // A reader that made us wait gets small pages until it keeps up again: what it
                // costs the server is a few KB, whatever its backlog in the log.
                self.page_size = if self.slow { SLOW_PAGE } else { PAGE };
                self.slow = false;
            }
            let page = match self.feed.next_page(self.page_size).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "SSE read failed; closing stream"
                    );
                    return None;
                }
            };
            if !page.is_empty() {
                if !self.owner_checked {
                    // Boxed: done once, and its state should not size every idle subscriber.
                    let check = authorize_thread_read(&self.ctx, &self.caller, &self.thread_id);
                    if let Err(e) = Box::pin(check).await {
                        tracing::info!(thread = %self.thread_id, reason = %e, "closing a stream on a thread the caller may not read");
                        return None;
                    }
                    self.owner_checked = true;
                }
                self.take_page(page);
                continue;
            }
            if self.closing {
                return None; // everything committed before the shutdown is sent
            }
            // Re-check the store when nothing woke it for a while: a wake-up is a hint, the log
            // is the truth.
            tokio::select! {
                r = self.feed.changed() => {
                    if r.is_err() {
                        return None;
                    }
                    self.woke_at = tokio::time::Instant::now();
                }
                _ = self.timer.as_mut() => {
                    let now = tokio::time::Instant::now();
                    let ping = self.next_ping <= now;
                    if ping {
                        self.next_ping = now + self.ctx.config.sse_ping;
                    } else if now >= self.woke_at + RECHECK {
                        self.feed.read_store_next();
                        self.woke_at = now;
                    }
                    let at = self.next_ping.min(self.woke_at + RECHECK);
                    self.timer.as_mut().reset(at);
                    if ping {
                        return Some(self.hand_over(Bytes::from_static(b": ping\n\n")));
                    }
                }
                // One more read to the head, then the end (above).
                _ = self.shutdown.changed() => self.closing = true,
            }
        }
    }

    fn hand_over(&mut self, piece: Bytes) -> Bytes {
        self.handed_at = Some(tokio::time::Instant::now());
        piece
    }

    /// Holds a page for handing over. A store page is rendered now and dropped, so a slow
    /// reader holds only its frames; a tail page is held as shared events.
    fn take_page(&mut self, page: Page) {
        self.page_in_hand = true;
        self.pending = match page {
            Page::Store(events) => {
                let mut buf = String::with_capacity(events.len() * 160);
                for e in &events {
                    if !self.renderer.render(e, &mut buf) {
                        self.ended = true;
                        break;
                    }
                }
                Pending::Frames(Bytes::from(buf))
            }
            Page::Tail(events) => Pending::Tail(events.into()),
        };
    }

    /// The next at most ~[`SEND_SLICE`] bytes of what is pending, so hyper's write queue holds
    /// parts of a page, not whole pages; `None` when nothing is.
    fn next_piece(&mut self) -> Option<Bytes> {
        loop {
            match &mut self.pending {
                Pending::Nothing => return None,
                Pending::Frames(frames) => {
                    if frames.is_empty() {
                        self.pending = Pending::Nothing;
                        continue;
                    }
                    return Some(frames.split_to(frames.len().min(SEND_SLICE)));
                }
                Pending::Tail(events) => {
                    if events.is_empty() {
                        self.pending = Pending::Nothing;
                        continue;
                    }
                    if self.renderer.is_n8n() {
                        // One event: its shared frame as it is, no copy.
                        if events.len() == 1 && !events[0].n8n_frame.is_empty() {
                            let e = events.pop_front().expect("one event");
                            return Some(e.n8n_frame.clone());
                        }
                        let size: usize = events.iter().map(|e| e.n8n_frame.len()).sum();
                        let mut buf = Vec::with_capacity(size.min(SEND_SLICE));
                        while buf.len() < SEND_SLICE {
                            let Some(e) = events.pop_front() else { break };
                            buf.extend_from_slice(&e.n8n_frame);
                        }
                        if !buf.is_empty() {
                            return Some(Bytes::from(buf));
                        }
                    } else {
                        let mut buf = String::new();
                        while buf.len() < SEND_SLICE {
                            let Some(e) = events.pop_front() else { break };
                            if !self.renderer.render(&e.event, &mut buf) {
                                self.ended = true;
                                self.pending = Pending::Nothing;
                                break;
                            }
                        }
                        if !buf.is_empty() {
                            return Some(Bytes::from(buf));
                        }
                    }
                }
            }
        }
    }
}
