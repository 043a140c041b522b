//! The relay's websocket frames (RFC 6455), read and written here once tungstenite's
//! handshake is done, so that a large reply goes on to chromiumoxide while it still arrives.
//!
//! A [`Reader`] task per socket turns frames into [`Frame`]s: whole messages, or, from the
//! browser, a [`Streamed`] reply to one of chromiumoxide's commands of [`STREAM_FROM`] bytes
//! or more. Its body comes in chunks as they are read, checked as UTF-8 and mended of lone
//! surrogates, and the client's [`Writer`] writes each at once. The browser is read as fast
//! as it sends, however slow the client, as when replies were read whole; [`Reading`] tells
//! the relay's loop a body's progress. What the relay reads itself comes whole.

use async_tungstenite::tungstenite::error::ProtocolError;
use async_tungstenite::tungstenite::protocol::CloseFrame;
use async_tungstenite::tungstenite::{Bytes, Error as WsError, Message, Utf8Bytes};
use bytes::BytesMut;
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::wire::{self, Mender};

/// A reply from the browser at least this large is streamed.
pub(super) const STREAM_FROM: u64 = 128 << 10;
/// What a large reply's first bytes must be to stream: Chromium's replies start so.
const REPLY_START: &[u8] = br#"{"id":"#;
/// How much of a large reply is read before it is judged.
const HEAD: usize = 32;
/// The most bytes one read of a streamed body asks for.
const CHUNK: usize = 256 << 10;
/// Frames read ahead of the relay's loop.
const FRAMES_AHEAD: usize = 4;
/// The reading buffer: many small frames per read.
const READ_BUFFER: usize = 64 << 10;

/// One message, as the relay's loop gets it and its writers take it.
pub(super) enum Frame {
    Whole(Message),
    Streamed(Streamed),
    /// From a reader only: the streamed reply with this head has been read to its end.
    Arrived(Bytes),
}

impl From<Message> for Frame {
    fn from(m: Message) -> Frame {
        Frame::Whole(m)
    }
}

/// A text message forwarded as it is read: its length, its first bytes (to tell what it is),
/// and its whole payload, in order, as it comes.
pub(super) struct Streamed {
    pub len: u64,
    pub head: Bytes,
    /// Unbounded so that a slow client never holds back reading the browser; the reader
    /// checked the length against `MAX_MESSAGE`.
    pub body: mpsc::UnboundedReceiver<Bytes>,
}

/// Why a [`Writer`] stopped.
#[derive(Debug)]
pub(super) enum WriteError {
    /// Its socket failed.
    Io(std::io::Error),
    /// A streamed reply ended short: the browser's socket failed inside it.
    Cut,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Io(e) => write!(f, "{e}"),
            WriteError::Cut => f.write_str("the browser's socket ended inside a streamed reply"),
        }
    }
}

/// While a streamed body is being read from the browser: when its last bytes came.
pub(super) type Reading = watch::Receiver<Option<Instant>>;

/// A reader's frames and the handle that owns its task.
pub(super) struct Spawned {
    pub frames: mpsc::Receiver<Result<Frame, WsError>>,
    pub reading: Reading,
    pub task: AbortOnDropHandle<()>,
}

/// A frame's header.
struct Header {
    fin: bool,
    opcode: u8,
    mask: Option<[u8; 4]>,
    len: u64,
}

const CONTINUATION: u8 = 0;
const TEXT: u8 = 1;
const BINARY: u8 = 2;
const CLOSE: u8 = 8;
const PING: u8 = 9;
const PONG: u8 = 10;

/// Reads one socket's frames on its own task.
pub(super) struct Reader<R> {
    io: BufReader<R>,
    /// Whether large replies to chromiumoxide's commands stream (the browser's socket).
    streams: bool,
    /// A fragmented message so far: its opcode and payload.
    partial: Option<(u8, Vec<u8>)>,
    reading: watch::Sender<Option<Instant>>,
}

impl<R: AsyncRead + Unpin + Send + 'static> Reader<R> {
    /// Starts reading `io` on a task the handle owns; each message, or the error that ended
    /// the socket, comes out of the receiver.
    pub fn spawn(io: R, streams: bool) -> Spawned {
        let (reading, reading_rx) = watch::channel(None);
        let reader = Reader {
            io: BufReader::with_capacity(READ_BUFFER, io),
            streams,
            partial: None,
            reading,
        };
        let (tx, frames) = mpsc::channel(FRAMES_AHEAD);
        let task = crate::quiet::spawn_busy(crate::quiet::Busy::Relay, reader.run(tx));
        Spawned {
            frames,
            reading: reading_rx,
            task: AbortOnDropHandle::new(task),
        }
    }

    async fn run(mut self, tx: mpsc::Sender<Result<Frame, WsError>>) {
        loop {
            let read = self.next(&tx).await;
            let last = matches!(read, Err(_) | Ok(Frame::Whole(Message::Close(_))));
            match read {
                Ok(frame) => {
                    if tx.send(Ok(frame)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                }
            }
            if last {
                return;
            }
        }
    }

    /// The next message; a streamed one is handed to `tx` as it starts, and is
    /// [`Frame::Arrived`] here. An error inside it ends its body short.
    async fn next(&mut self, tx: &mpsc::Sender<Result<Frame, WsError>>) -> Result<Frame, WsError> {
        loop {
            let h = self.header().await?;
            if h.len > crate::websocket::MAX_MESSAGE as u64 {
                return Err(too_large(h.len));
            }
            match h.opcode {
                CLOSE | PING | PONG => return self.control(&h).await,
                TEXT if self.streams && h.fin && h.len >= STREAM_FROM => {
                    if self.partial.is_some() {
                        return Err(protocol("a new message inside a fragmented one"));
                    }
                    return self.large_text(&h, tx).await;
                }
                TEXT | BINARY | CONTINUATION => {
                    if let Some(m) = self.data(&h).await? {
                        return Ok(Frame::Whole(m));
                    }
                }
                _ => return Err(protocol("an unknown opcode")),
            }
        }
    }

    async fn header(&mut self) -> Result<Header, WsError> {
        let mut two = [0u8; 2];
        self.read_exact(&mut two).await?;
        if two[0] & 0x70 != 0 {
            return Err(protocol("reserved bits set"));
        }
        let len = match two[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                self.read_exact(&mut b).await?;
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0u8; 8];
                self.read_exact(&mut b).await?;
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        let mask = if two[1] & 0x80 != 0 {
            let mut key = [0u8; 4];
            self.read_exact(&mut key).await?;
            Some(key)
        } else {
            None
        };
        Ok(Header {
            fin: two[0] & 0x80 != 0,
            opcode: two[0] & 0x0f,
            mask,
            len,
        })
    }

    /// A close, ping or pong frame.
    async fn control(&mut self, h: &Header) -> Result<Frame, WsError> {
        if !h.fin || h.len > 125 {
            return Err(protocol("a fragmented or long control frame"));
        }
        let payload = Bytes::from(self.payload(h, h.len as usize, 0).await?);
        Ok(Frame::Whole(match h.opcode {
            PING => Message::Ping(payload),
            PONG => Message::Pong(payload),
            _ => Message::Close(close_frame(&payload)),
        }))
    }

    /// A data frame: the whole message once its last fragment is read.
    async fn data(&mut self, h: &Header) -> Result<Option<Message>, WsError> {
        let payload = self.payload(h, h.len as usize, 0).await?;
        let (opcode, payload) = match (h.opcode, self.partial.take()) {
            (CONTINUATION, None) => return Err(protocol("a continuation of nothing")),
            (CONTINUATION, Some((opcode, mut so_far))) => {
                so_far.extend_from_slice(&payload);
                if so_far.len() > crate::websocket::MAX_MESSAGE {
                    return Err(too_large(so_far.len() as u64));
                }
                (opcode, so_far)
            }
            (_, Some(_)) => return Err(protocol("a new message inside a fragmented one")),
            (opcode, None) => (opcode, payload),
        };
        if !h.fin {
            self.partial = Some((opcode, payload));
            return Ok(None);
        }
        message(opcode, payload).map(Some)
    }

    /// A large text frame: streamed if it is a reply to chromiumoxide, else read whole.
    async fn large_text(
        &mut self,
        h: &Header,
        tx: &mpsc::Sender<Result<Frame, WsError>>,
    ) -> Result<Frame, WsError> {
        let head = self.payload(h, HEAD, 0).await?;
        let streams = head.starts_with(REPLY_START)
            && wire::reply_id(&head).is_some_and(|id| id < wire::OWN_ID_BASE);
        if !streams {
            let mut whole = head;
            whole.extend_from_slice(&self.payload(h, h.len as usize - HEAD, HEAD as u64).await?);
            return message(TEXT, whole).map(Frame::Whole);
        }
        let mut utf8 = Utf8Check::default();
        utf8.push(&head)?;
        let head = Bytes::from(head);
        let (body_tx, body) = mpsc::unbounded_channel();
        let streamed = Streamed {
            len: h.len,
            head: head.clone(),
            body,
        };
        self.reading.send_replace(Some(Instant::now()));
        // The loop may be gone; the frame is still read to its end.
        let _ = tx.send(Ok(Frame::Streamed(streamed))).await;
        let read = self.body(h, head.clone(), body_tx, utf8).await;
        self.reading.send_replace(None);
        read.map(|()| Frame::Arrived(head))
    }

    /// The rest of a streamed reply's payload, into `body_tx`; the first bytes are `head`.
    /// The body ends short if the payload is not all read or is not UTF-8.
    async fn body(
        &mut self,
        h: &Header,
        head: Bytes,
        body_tx: mpsc::UnboundedSender<Bytes>,
        mut utf8: Utf8Check,
    ) -> Result<(), WsError> {
        let mut mender = Mender::default();
        let _ = body_tx.send(mender.push(head));
        let mut read = HEAD as u64;
        let mut buf = BytesMut::new();
        while read < h.len {
            if buf.capacity() - buf.len() < CHUNK / 16 {
                buf = BytesMut::with_capacity(CHUNK);
            }
            let want = (buf.capacity() - buf.len()).min((h.len - read) as usize);
            let start = buf.len();
            buf.resize(start + want, 0);
            let n = self.read_some(&mut buf[start..]).await;
            buf.truncate(start + n.as_ref().map_or(0, |n| *n));
            let n = n?;
            if let Some(key) = h.mask {
                unmask(&mut buf[start..], key, read);
            }
            utf8.push(&buf[start..])?;
            read += n as u64;
            if read == h.len {
                utf8.finish()?;
            }
            // No notice per chunk: the loop looks when it needs to.
            self.reading.send_if_modified(|at| {
                *at = Some(Instant::now());
                false
            });
            let chunk = buf.split().freeze();
            let _ = body_tx.send(mender.push(chunk));
        }
        let _ = body_tx.send(mender.finish());
        Ok(())
    }

    /// `len` bytes of `h`'s payload, `offset` bytes into it, unmasked.
    async fn payload(&mut self, h: &Header, len: usize, offset: u64) -> Result<Vec<u8>, WsError> {
        let mut payload = vec![0u8; len];
        self.read_exact(&mut payload).await?;
        if let Some(key) = h.mask {
            unmask(&mut payload, key, offset);
        }
        Ok(payload)
    }

    async fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), WsError> {
        self.io.read_exact(buf).await.map_err(read_error)
    }

    /// At least one byte into `buf`.
    async fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, WsError> {
        match self.io.read(buf).await {
            Ok(0) => Err(reset()),
            Ok(n) => Ok(n),
            Err(e) => Err(read_error(e)),
        }
    }
}

/// UTF-8 checked piece by piece: a character cut between pieces is judged with the next.
#[derive(Default)]
struct Utf8Check {
    /// The start of a character the last piece ended inside: at most 3 bytes.
    held: Vec<u8>,
}

impl Utf8Check {
    fn push(&mut self, mut piece: &[u8]) -> Result<(), WsError> {
        if !self.held.is_empty() {
            let had = self.held.len();
            let take = (4 - had).min(piece.len());
            self.held.extend_from_slice(&piece[..take]);
            let valid = match std::str::from_utf8(&self.held) {
                Ok(_) => self.held.len(),
                Err(e) if e.error_len().is_some() => return Err(not_utf8()),
                // Still cut: the piece was shorter than the rest of the character.
                Err(e) if e.valid_up_to() == 0 => return Ok(()),
                Err(e) => e.valid_up_to(),
            };
            piece = &piece[valid - had..];
            self.held.clear();
        }
        match std::str::from_utf8(piece) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_some() => Err(not_utf8()),
            Err(e) => {
                self.held = piece[e.valid_up_to()..].to_vec();
                Ok(())
            }
        }
    }

    /// The end of the text: nothing may be left cut.
    fn finish(&self) -> Result<(), WsError> {
        match self.held.is_empty() {
            true => Ok(()),
            false => Err(not_utf8()),
        }
    }
}

fn not_utf8() -> WsError {
    WsError::Utf8("a text message that is not UTF-8".into())
}

/// A message of `opcode` from its payload (text checked as UTF-8).
fn message(opcode: u8, payload: Vec<u8>) -> Result<Message, WsError> {
    if opcode == BINARY {
        return Ok(Message::Binary(Bytes::from(payload)));
    }
    Utf8Bytes::try_from(Bytes::from(payload))
        .map(Message::Text)
        .map_err(|e| WsError::Utf8(e.to_string()))
}

/// A close frame's code and reason, when it has them.
fn close_frame(payload: &[u8]) -> Option<CloseFrame> {
    let code = u16::from_be_bytes([*payload.first()?, *payload.get(1)?]);
    let reason = String::from_utf8_lossy(&payload[2..]).into_owned();
    Some(CloseFrame {
        code: code.into(),
        reason: reason.into(),
    })
}

/// XORs `data`, `offset` bytes into a payload, with the payload's mask `key`.
fn unmask(data: &mut [u8], key: [u8; 4], offset: u64) {
    let shift = (offset % 4) as usize;
    let key: [u8; 4] = std::array::from_fn(|i| key[(i + shift) % 4]);
    let word = u32::from_ne_bytes(key);
    let mut words = data.chunks_exact_mut(4);
    for w in &mut words {
        let x = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) ^ word;
        w.copy_from_slice(&x.to_ne_bytes());
    }
    for (i, b) in words.into_remainder().iter_mut().enumerate() {
        *b ^= key[i];
    }
}

/// The socket ended without a closing handshake, as tungstenite reports it.
fn reset() -> WsError {
    WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake)
}

fn read_error(e: std::io::Error) -> WsError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        reset()
    } else {
        WsError::Io(e)
    }
}

fn protocol(what: &'static str) -> WsError {
    WsError::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("websocket protocol error: {what}"),
    ))
}

fn too_large(len: u64) -> WsError {
    WsError::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "a websocket message of {len} bytes, more than the {} allowed",
            crate::websocket::MAX_MESSAGE
        ),
    ))
}

/// Writes frames to one socket: masked on the browser's (outlive is its client), not on
/// chromiumoxide's.
pub(super) struct Writer<W> {
    io: W,
    masks: bool,
}

impl<W: AsyncWrite + Unpin> Writer<W> {
    pub fn new(io: W, masks: bool) -> Writer<W> {
        Writer { io, masks }
    }

    /// Writes `frame`, then flushes.
    pub async fn send(&mut self, frame: Frame) -> Result<(), WriteError> {
        match frame {
            Frame::Whole(m) => self.whole(m).await?,
            Frame::Streamed(s) => self.streamed(s).await?,
            Frame::Arrived(_) => return Ok(()),
        }
        self.io.flush().await.map_err(WriteError::Io)
    }

    async fn whole(&mut self, m: Message) -> Result<(), WriteError> {
        let (opcode, payload) = match m {
            Message::Text(t) => (TEXT, Bytes::from(t)),
            Message::Binary(b) => (BINARY, b),
            Message::Ping(b) => (PING, b),
            Message::Pong(b) => (PONG, b),
            Message::Close(_) => (CLOSE, Bytes::new()),
            Message::Frame(_) => return Ok(()),
        };
        let key = self.masks.then(rand::random::<[u8; 4]>);
        let (header, n) = header(opcode, payload.len() as u64, key);
        if key.is_none() && payload.len() > READ_BUFFER {
            // Large and unmasked: written from where it is.
            self.write(&header[..n]).await?;
            return self.write(&payload).await;
        }
        let mut out = Vec::with_capacity(n + payload.len());
        out.extend_from_slice(&header[..n]);
        out.extend_from_slice(&payload);
        if let Some(key) = key {
            unmask(&mut out[n..], key, 0);
        }
        self.write(&out).await
    }

    async fn streamed(&mut self, mut s: Streamed) -> Result<(), WriteError> {
        let key = self.masks.then(rand::random::<[u8; 4]>);
        let (header, n) = header(TEXT, s.len, key);
        self.write(&header[..n]).await?;
        let mut written = 0u64;
        while let Some(chunk) = s.body.recv().await {
            match key {
                Some(key) => {
                    let mut masked = chunk.to_vec();
                    unmask(&mut masked, key, written);
                    self.write(&masked).await?;
                }
                None => self.write(&chunk).await?,
            }
            written += chunk.len() as u64;
        }
        if written != s.len {
            // The browser's socket ended inside the message: so does this one.
            return Err(WriteError::Cut);
        }
        Ok(())
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        self.io.write_all(bytes).await.map_err(WriteError::Io)
    }
}

/// A final frame's header: its bytes and how many of them there are.
fn header(opcode: u8, len: u64, key: Option<[u8; 4]>) -> ([u8; 14], usize) {
    let mut h = [0u8; 14];
    h[0] = 0x80 | opcode;
    let masked = if key.is_some() { 0x80 } else { 0 };
    let mut n = match len {
        0..=125 => {
            h[1] = masked | len as u8;
            2
        }
        126..=0xffff => {
            h[1] = masked | 126;
            h[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            h[1] = masked | 127;
            h[2..10].copy_from_slice(&len.to_be_bytes());
            10
        }
    };
    if let Some(key) = key {
        h[n..n + 4].copy_from_slice(&key);
        n += 4;
    }
    (h, n)
}

#[cfg(test)]
mod tests;
