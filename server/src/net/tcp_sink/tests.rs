//! The sink over real loopback sockets whose reader is slow: messages from both sides
//! arrive whole and in order, the sender that must not wait never does, and it hears when
//! a queue it was held back by is gone.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_secs(10);

/// A connected pair on loopback with small buffers, so the socket fills after a few
/// messages while the reader does not read.
async fn pair() -> (Arc<TcpSink>, TcpStream) {
    let (writer, reader) = crate::net::tcp::slow_reader_pair(16 * 1024).await;
    (TcpSink::new(writer.into_split().1), reader)
}

/// A message as the test frames it: a tag byte, its number, its body length, the body
/// (each body byte the number's low byte), so the reader can check every message whole.
fn message(tag: u8, n: u32, len: usize) -> (Vec<u8>, Bytes) {
    let mut head = vec![tag];
    head.extend_from_slice(&n.to_be_bytes());
    head.extend_from_slice(&(len as u32).to_be_bytes());
    (head, Bytes::from(vec![n as u8; len]))
}

/// Reads messages until `want` of each tag have come; returns the numbers seen per tag.
async fn read_all(mut r: TcpStream, want: [usize; 2], pause: Duration) -> [Vec<u32>; 2] {
    let mut seen: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    let mut head = [0u8; 9];
    while seen[0].len() < want[0] || seen[1].len() < want[1] {
        r.read_exact(&mut head).await.unwrap();
        let tag = usize::from(head[0]);
        assert!(
            tag < 2,
            "a message starts with tag {tag}: the stream is cut"
        );
        let n = u32::from_be_bytes(head[1..5].try_into().unwrap());
        let len = u32::from_be_bytes(head[5..9].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).await.unwrap();
        assert!(body.iter().all(|b| *b == n as u8), "message {n} is cut");
        seen[tag].push(n);
        tokio::time::sleep(pause).await;
    }
    seen
}

/// The connection task's side, as the RTSP connection's loop: its own `count` messages
/// through the writer, and a flush whenever the sink says bytes were queued (by either
/// side), until `stop`.
async fn connection_side(
    sink: Arc<TcpSink>,
    count: u32,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut w = sink.writer();
    let mut n = 0;
    let mut every = tokio::time::interval(Duration::from_millis(3));
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = sink.queued() => w.flush().await.unwrap(),
            _ = every.tick(), if n < count => {
                let (head, body) = message(0, n, 3000);
                let mut all = head;
                all.extend_from_slice(&body);
                w.write_all(&all).await.unwrap();
                n += 1;
            }
        }
    }
    w.flush().await.unwrap();
}

#[tokio::test]
async fn messages_from_both_sides_arrive_whole_and_in_order_past_a_slow_reader() {
    let (sink, reader) = pair().await;
    const CONN: u32 = 60;
    const SENDER: u32 = 200;
    // A reader slower than the two sides together (a pause after each message).
    let read = tokio::spawn(read_all(
        reader,
        [CONN as usize, SENDER as usize],
        Duration::from_millis(2),
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let conn = tokio::spawn(connection_side(sink.clone(), CONN, stopped));
    // The sender that must not wait: a batch whenever nothing is queued, else skipped.
    let (mut sent, mut skipped) = (0u32, 0u32);
    let started = std::time::Instant::now();
    while sent < SENDER {
        assert!(started.elapsed() < DEADLINE, "sent {sent} in the deadline");
        if sink.busy_or_arm() {
            skipped += 1;
        } else {
            let (head, body) = message(1, sent, 5000);
            let s = sink.send(&[Piece::Copy(&head), Piece::Shared(&body)]);
            assert_ne!(s, Sent::Closed);
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let seen = tokio::time::timeout(DEADLINE, read)
        .await
        .expect("every message within the deadline")
        .unwrap();
    let _ = stop.send(());
    conn.await.unwrap();
    // Every message whole, each side's in its own order, none lost.
    assert_eq!(seen[0], (0..CONN).collect::<Vec<_>>());
    assert_eq!(seen[1], (0..SENDER).collect::<Vec<_>>());
    // The slow reader held the sender back without it ever waiting.
    assert!(
        skipped > 0,
        "the socket never filled: the test shows nothing"
    );
}

#[tokio::test]
async fn a_sender_held_back_hears_when_the_queue_is_gone() {
    let (sink, mut reader) = pair().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    sink.on_drained(Box::new(move || {
        c.fetch_add(1, Ordering::SeqCst);
    }));
    // Fill the socket until a message has to wait.
    let body = Bytes::from(vec![9u8; 8192]);
    let mut n = 0;
    while sink.send(&[Piece::Shared(&body)]) == Sent::Written {
        n += 1;
        assert!(n < 1000, "the socket never filled");
    }
    assert!(sink.busy_or_arm());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The reader reads everything; the connection task's flush empties the queue.
    let total = (n + 1) * body.len();
    let read = tokio::spawn(async move {
        let mut got = vec![0u8; total];
        reader.read_exact(&mut got).await.unwrap();
        got.iter().all(|b| *b == 9)
    });
    let mut w = sink.writer();
    tokio::time::timeout(DEADLINE, w.flush())
        .await
        .expect("the flush within the deadline")
        .unwrap();
    assert!(read.await.unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "told once");
    assert!(!sink.busy_or_arm());
    // Not armed any more: a later drain does not call again.
    tokio::time::timeout(DEADLINE, w.flush())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_gone_peer_closes_the_sink() {
    let (sink, reader) = pair().await;
    drop(reader);
    let body = Bytes::from(vec![1u8; 4096]);
    let started = std::time::Instant::now();
    // The first writes may still be accepted; the reset makes a later one fail.
    loop {
        assert!(
            started.elapsed() < DEADLINE,
            "the sink never noticed the peer was gone"
        );
        let s = sink.send(&[Piece::Shared(&body)]);
        if s == Sent::Closed {
            break;
        }
        if s == Sent::Queued {
            // The connection task's flush finds the failure.
            let mut w = sink.writer();
            let r = tokio::time::timeout(DEADLINE, w.flush()).await.unwrap();
            assert!(r.is_err(), "a flush to a closed peer succeeded");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(sink.send(&[Piece::Copy(b"x")]), Sent::Closed);
}

#[tokio::test]
async fn a_message_of_more_pieces_than_one_write_takes_arrives_whole() {
    let (sink, mut reader) = pair().await;
    // 1500 pieces: past the 64 a write keeps on the stack, and past the 1024 iovecs one
    // `sendmsg` takes, so the rest must be queued in order behind what was written.
    let pieces: Vec<Vec<u8>> = (0..1500u32)
        .map(|i| {
            let mut p = i.to_be_bytes().to_vec();
            p.resize(4 + (i % 7) as usize, i as u8);
            p
        })
        .collect();
    let want: Vec<u8> = pieces.concat();
    let refs: Vec<Piece<'_>> = pieces.iter().map(|p| Piece::Copy(p)).collect();
    assert_ne!(sink.send(&refs), Sent::Closed);
    let len = want.len();
    let read = tokio::spawn(async move {
        let mut got = vec![0u8; len];
        reader.read_exact(&mut got).await.unwrap();
        got
    });
    let mut w = sink.writer();
    tokio::time::timeout(DEADLINE, w.flush())
        .await
        .expect("the flush within the deadline")
        .unwrap();
    let got = tokio::time::timeout(DEADLINE, read)
        .await
        .expect("every byte within the deadline")
        .unwrap();
    assert!(got == want, "the message arrived cut or out of order");
}
