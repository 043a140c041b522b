//! The vocabulary of the id table: which kinds of id the front keeps stable, and where in a
//! message they sit.

/// A kind of id the front keeps stable across browsers, or offsets so it never collides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    /// `Target.SessionID`.
    Session,
    /// `Target.TargetID`.
    Target,
    /// `Page.FrameId`. A main frame's id is its page's target id; child frames are renewed.
    Frame,
    /// `Browser.BrowserContextID`.
    BrowserContext,
    /// `Page.ScriptIdentifier`: Chrome counts them per session ("1", "2", …).
    Script,
    /// `Runtime.ExecutionContextId`: an integer, renewed with each document.
    ExecutionContext,
}

/// What a field holds: an id, or an object with fields that hold some. An array holds its
/// elements' shape (at any depth), so the table does not say which fields are arrays.
#[derive(Debug)]
pub(super) enum Shape {
    /// An id of this kind.
    Id(Kind),
    /// An object; only these of its fields hold ids.
    Obj(&'static [Field]),
}

/// A field of an object (or of a command's params, a reply's result, an event's params)
/// that holds ids.
#[derive(Debug)]
pub(super) struct Field {
    pub(super) name: &'static str,
    pub(super) shape: Shape,
}

impl Field {
    /// A field holding an id of `kind` (or an array of them).
    pub(super) const fn id(name: &'static str, kind: Kind) -> Field {
        Field {
            name,
            shape: Shape::Id(kind),
        }
    }

    /// A field holding an object (or an array of them) with these fields that hold ids.
    pub(super) const fn obj(name: &'static str, fields: &'static [Field]) -> Field {
        Field {
            name,
            shape: Shape::Obj(fields),
        }
    }
}

/// The fields of a command that hold ids: in its params, and in its reply's result.
#[derive(Debug)]
pub(super) struct Method {
    pub(super) params: &'static [Field],
    pub(super) result: &'static [Field],
}
