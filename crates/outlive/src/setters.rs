//! `setters!`: the chainable setters that store their argument as it is.

/// Expands entries `/// docs` + `fn name(arg: Type);` inside an `impl` block into
/// `pub fn name(mut self, arg: Type) -> Self` that stores `arg` in the field `name`. The
/// attributes (the docs with their `# Default`) pass through, so rustdoc shows each setter as
/// if it were written out. Setters that convert or check their argument stay hand-written.
macro_rules! setters {
    ($($(#[$attr:meta])* fn $name:ident($arg:ident: $ty:ty);)*) => {
        $(
            $(#[$attr])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$name = $arg;
                self
            }
        )*
    };
}

pub(crate) use setters;
