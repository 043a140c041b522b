//! A frame's ids put into the other side's terms, in its bytes (issue 51 design, §2).
//!
//! The rewriter walks only what the id table ([`schema`]) names: the
//! envelope's `sessionId`, and the params, result or event params of the method, through
//! nested objects and arrays. Everything else is stepped over by structure with the relay's
//! cursor, and each id is spliced in place. The frame is never parsed into a
//! `serde_json::Value`: that would rewrite numbers and fail on the lone surrogates Chrome
//! sends. An id the [`Translate`] does not know is left as it is.

use std::borrow::Cow;

use super::schema;
use super::shape::{Field, Kind, Shape};
use crate::relay::wire::{Head, Scan, mend_lone_surrogates};

/// Ids in the other side's terms, one at a time.
pub(super) trait Translate {
    /// What string id `id` of `kind` becomes (`None`: as it is). `session` is the client's
    /// session the frame is on.
    fn text(&mut self, kind: Kind, id: &str, session: Option<&str>) -> Option<String>;

    /// What integer id `id` of `kind` becomes (`None`: as it is).
    fn number(&mut self, kind: Kind, id: i64, session: Option<&str>) -> Option<i64>;
}

/// A command from the client, in the browser's ids: `None` if it stays as it is.
pub(super) fn to_browser(frame: &str, t: &mut impl Translate) -> Option<String> {
    let head = Head::of(frame.as_bytes());
    let method = head.method.as_deref()?;
    let fields = schema::command(method).map_or(&[][..], |m| m.params);
    let session = head.session_id.as_deref();
    let new_session = session.and_then(|s| t.text(Kind::Session, s, session));
    rewrite(frame, "params", fields, session, new_session.as_deref(), t)
}

/// A reply or event from the browser, in the client's ids: `None` if it stays as it is.
/// `method_of` names the command a reply answers (the front's table of pending commands).
pub(super) fn to_client<'m>(
    frame: &str,
    method_of: impl FnOnce(u64) -> Option<&'m str>,
    t: &mut impl Translate,
) -> Option<String> {
    let head = Head::of(frame.as_bytes());
    let (body, fields) = match (head.id, head.method.as_deref()) {
        (Some(id), _) => (
            "result",
            method_of(id).and_then(schema::command).map(|m| m.result),
        ),
        (None, Some(method)) => ("params", schema::event(method)),
        (None, None) => return None,
    };
    let fields = fields.unwrap_or(&[]);
    let new_session = head
        .session_id
        .as_deref()
        .and_then(|s| t.text(Kind::Session, s, None));
    let session = new_session.as_deref().or(head.session_id.as_deref());
    rewrite(frame, body, fields, session, new_session.as_deref(), t)
}

/// Rewrites the ids of `frame`: the top-level `sessionId` becomes `new_session`, and the
/// ids in the `body` object follow `fields`. `session` is the client's session, for the
/// translation. `None` where nothing changes, or where the frame is not a JSON object.
pub(super) fn rewrite(
    frame: &str,
    body: &str,
    fields: &'static [Field],
    session: Option<&str>,
    new_session: Option<&str>,
    t: &mut impl Translate,
) -> Option<String> {
    if fields.is_empty() && new_session.is_none() {
        return None;
    }
    let mut walk = Walk {
        s: Scan::new(frame.as_bytes()),
        t,
        session,
        edits: Vec::new(),
    };
    walk.top(body, fields, new_session)?;
    if walk.edits.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(frame.len() + 16 * walk.edits.len());
    let mut from = 0;
    for (start, end, text) in &walk.edits {
        // Every edit starts and ends at an ASCII delimiter: whole characters.
        out.push_str(&frame[from..*start]);
        out.push_str(text);
        from = *end;
    }
    out.push_str(&frame[from..]);
    Some(out)
}

/// A walk over one frame, collecting the splices.
struct Walk<'f, 't, T> {
    s: Scan<'f>,
    t: &'t mut T,
    session: Option<&'t str>,
    /// Byte ranges of the frame and what replaces them, in order.
    edits: Vec<(usize, usize, String)>,
}

impl<T: Translate> Walk<'_, '_, T> {
    /// The frame's top level: its `sessionId` and its `body`.
    fn top(
        &mut self,
        body: &str,
        fields: &'static [Field],
        new_session: Option<&str>,
    ) -> Option<()> {
        self.members(|walk, key| match key {
            Some("sessionId") if walk.s.peek() == Some(b'"') => {
                let start = walk.s.at;
                walk.s.string()?;
                if let Some(new) = new_session {
                    walk.edits.push((start, walk.s.at, json_string(new)));
                }
                Some(())
            }
            Some(k) if k == body && !fields.is_empty() => walk.value(&Shape::Obj(fields)),
            _ => walk.s.skip_value(),
        })
    }

    /// Calls `member` for each member of the object at the cursor, the cursor at its value.
    /// The key is `None` where serde cannot decode it (a lone surrogate): no field's.
    fn members(
        &mut self,
        mut member: impl FnMut(&mut Self, Option<&str>) -> Option<()>,
    ) -> Option<()> {
        self.s.eat(b'{')?;
        self.s.ws();
        if self.s.peek()? == b'}' {
            self.s.at += 1;
            return Some(());
        }
        loop {
            self.s.ws();
            let key = self.s.string()?;
            self.s.eat(b':')?;
            self.s.ws();
            let text: Option<Cow<'_, str>> = key.text();
            member(self, text.as_deref())?;
            self.s.ws();
            match self.s.peek()? {
                b',' => self.s.at += 1,
                b'}' => {
                    self.s.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The value at the cursor, holding `shape` (an array holds it in each element).
    fn value(&mut self, shape: &Shape) -> Option<()> {
        self.s.ws();
        match (self.s.peek()?, shape) {
            (b'[', _) => self.array(shape),
            (b'{', Shape::Obj(fields)) => self.members(|walk, key| {
                match key.and_then(|k| fields.iter().find(|f| f.name == k)) {
                    Some(field) => walk.value(&field.shape),
                    None => walk.s.skip_value(),
                }
            }),
            (b'"', Shape::Id(kind)) => {
                let start = self.s.at;
                let id = self.s.string()?.text();
                let new = id.and_then(|id| self.t.text(*kind, &id, self.session));
                if let Some(new) = new {
                    self.edits.push((start, self.s.at, json_string(&new)));
                }
                Some(())
            }
            (b'-' | b'0'..=b'9', Shape::Id(kind)) => {
                let start = self.s.at;
                let token = self.s.scalar()?;
                let id = std::str::from_utf8(token).ok().and_then(|t| t.parse().ok());
                let new = id.and_then(|id| self.t.number(*kind, id, self.session));
                if let Some(new) = new {
                    self.edits.push((start, self.s.at, new.to_string()));
                }
                Some(())
            }
            _ => self.s.skip_value(),
        }
    }

    fn array(&mut self, shape: &Shape) -> Option<()> {
        self.s.eat(b'[')?;
        self.s.ws();
        if self.s.peek()? == b']' {
            self.s.at += 1;
            return Some(());
        }
        loop {
            self.value(shape)?;
            self.s.ws();
            match self.s.peek()? {
                b',' => self.s.at += 1,
                b']' => {
                    self.s.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

/// The text of member `key` of the JSON object `frame` (its first, at the top level).
pub(super) fn member<'f>(frame: &'f str, key: &str) -> Option<&'f str> {
    let mut s = Scan::new(frame.as_bytes());
    s.eat(b'{')?;
    loop {
        s.ws();
        if s.peek()? == b'}' {
            return None;
        }
        let name = s.string()?;
        s.eat(b':')?;
        s.ws();
        let start = s.at;
        s.skip_value()?;
        if name.text().as_deref() == Some(key) {
            return frame.get(start..s.at);
        }
        s.ws();
        match s.peek()? {
            b',' => s.at += 1,
            _ => return None,
        }
    }
}

/// The fields of `json` serde reads into `T` (a lone surrogate mended first); `T`'s defaults
/// if it is absent or unreadable.
pub(super) fn read<T: serde::de::DeserializeOwned + Default>(json: Option<&str>) -> T {
    let Some(json) = json else {
        return T::default();
    };
    serde_json::from_str(json)
        .or_else(|e| match mend_lone_surrogates(json.as_bytes()) {
            Some(mended) => serde_json::from_slice(&mended),
            None => Err(e),
        })
        .unwrap_or_default()
}

/// `id` as a JSON string.
fn json_string(id: &str) -> String {
    serde_json::Value::from(id).to_string()
}

#[cfg(test)]
mod tests;
