//! The generator of `schema.rs`: it reads the PDL that chromiumoxide_cdp ships (the version
//! in `Cargo.lock`), derives the id table again, and fails when the checked-in one differs.
//!
//! The derivation: resolve aliases and arrays; an object type *reaches* an id when a field's
//! element type is an id or reaches one (a fixpoint, so recursive types such as
//! `DOM.Node.children[]` fall out); per method, keep the fields that reach one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::super::shape::{Field, Shape};
use super::*;

const REFRESH: &str = "OUTLIVE_BLESS=1 cargo test -p outlive --lib front::swap::schema";

/// The PDL types the front keeps stable, and their `Kind`.
const IDS: [(&str, &str); 6] = [
    ("Target.SessionID", "Session"),
    ("Target.TargetID", "Target"),
    ("Page.FrameId", "Frame"),
    ("Browser.BrowserContextID", "BrowserContext"),
    ("Page.ScriptIdentifier", "Script"),
    ("Runtime.ExecutionContextId", "ExecutionContext"),
];

/// Fields the PDL types as `object` that hold ids: (type, field, a name for its type, its
/// fields). Playwright and Puppeteer find a context's frame by `auxData.frameId`.
type Extra = (&'static str, &'static str, &'static str, &'static [(&'static str, &'static str)]);
const EXTRAS: [Extra; 1] = [(
    "Runtime.ExecutionContextDescription",
    "auxData",
    "Runtime.ExecutionContextAuxData",
    &[("frameId", "Page.FrameId")],
)];

const PRIMITIVES: [&str; 8] = [
    "string", "integer", "number", "boolean", "object", "any", "binary", "enum",
];

/// A type as a field names it.
#[derive(Clone, Debug)]
enum Ty {
    Named(String),
    Array(Box<Ty>),
}

/// A type's definition.
enum Def {
    Alias(Ty),
    Object(Vec<(String, Ty)>),
}

type Fields = Vec<(String, Ty)>;

#[derive(Default)]
struct Protocol {
    types: BTreeMap<String, Def>,
    commands: BTreeMap<String, (Fields, Fields)>,
    events: BTreeMap<String, Fields>,
}

/// Where the field lines of the item being read go.
enum Into_ {
    Nothing,
    Type(String),
    Command(String),
    Event(String),
}

impl Protocol {
    /// Reads `js_protocol.pdl` and `domains/*.pdl` (`browser_protocol.pdl` only includes
    /// them).
    fn read(dir: &Path) -> Protocol {
        let mut files = vec![dir.join("js_protocol.pdl")];
        let mut domains: Vec<PathBuf> = std::fs::read_dir(dir.join("domains"))
            .expect("the PDL's domains/")
            .map(|e| e.expect("a PDL file").path())
            .filter(|p| p.extension().is_some_and(|e| e == "pdl"))
            .collect();
        domains.sort();
        files.extend(domains);
        let mut protocol = Protocol::default();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a readable PDL file");
            protocol.parse(&text);
        }
        protocol
    }

    fn parse(&mut self, text: &str) {
        let (mut domain, mut into, mut section) = (String::new(), Into_::Nothing, String::new());
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            let toks: Vec<&str> = trimmed
                .split_whitespace()
                .filter(|t| !matches!(*t, "experimental" | "deprecated"))
                .collect();
            let norm = |t: &str| {
                if PRIMITIVES.contains(&t) || t.contains('.') {
                    t.to_owned()
                } else {
                    format!("{domain}.{t}")
                }
            };
            match indent {
                0 if toks[0] == "domain" => domain = toks[1].to_owned(),
                2 => {
                    section.clear();
                    into = match toks[0] {
                        "type" => {
                            let name = format!("{domain}.{}", toks[1]);
                            let def = match toks[3] {
                                "object" => Def::Object(Vec::new()),
                                "array" => Def::Alias(Ty::Array(Box::new(Ty::Named(norm(toks[5]))))),
                                other => Def::Alias(Ty::Named(norm(other))),
                            };
                            self.types.insert(name.clone(), def);
                            Into_::Type(name)
                        }
                        "command" => {
                            let name = format!("{domain}.{}", toks[1]);
                            self.commands.insert(name.clone(), Default::default());
                            Into_::Command(name)
                        }
                        "event" => {
                            let name = format!("{domain}.{}", toks[1]);
                            self.events.insert(name.clone(), Vec::new());
                            Into_::Event(name)
                        }
                        _ => Into_::Nothing,
                    }
                }
                4 => toks[0].clone_into(&mut section),
                6 if matches!(section.as_str(), "properties" | "parameters" | "returns") => {
                    let toks = toks.strip_prefix(&["optional"]).unwrap_or(&toks);
                    let (ty, name) = match toks[0] {
                        "array" => (Ty::Array(Box::new(Ty::Named(norm(toks[2])))), toks[3]),
                        "enum" => (Ty::Named("enum".into()), toks[1]),
                        t => (Ty::Named(norm(t)), toks[1]),
                    };
                    let field = (name.to_owned(), ty);
                    match &into {
                        Into_::Type(t) => {
                            if let Some(Def::Object(fields)) = self.types.get_mut(t) {
                                fields.push(field);
                            }
                        }
                        Into_::Command(c) => {
                            let (params, returns) = self.commands.get_mut(c).expect("read");
                            if section == "returns" { returns } else { params }.push(field);
                        }
                        Into_::Event(e) => self.events.get_mut(e).expect("read").push(field),
                        Into_::Nothing => {}
                    }
                }
                _ => {}
            }
        }
    }

    /// Adds [`EXTRAS`]: the untyped fields typed as objects of their own.
    fn with_extras(mut self) -> Protocol {
        for (owner, field, name, fields) in EXTRAS {
            let fields = fields
                .iter()
                .map(|(n, t)| ((*n).to_owned(), Ty::Named((*t).to_owned())))
                .collect();
            self.types.insert(name.to_owned(), Def::Object(fields));
            let Some(Def::Object(owner)) = self.types.get_mut(owner) else {
                panic!("{owner} is no longer an object type in the PDL");
            };
            let slot = owner.iter_mut().find(|(n, _)| n == field);
            let (_, ty) = slot.unwrap_or_else(|| panic!("{field} is no longer a field"));
            *ty = Ty::Named(name.to_owned());
        }
        self
    }

    /// The type at the bottom of `ty`, through arrays and aliases, stopping at an id type.
    fn element(&self, ty: &Ty) -> String {
        match ty {
            Ty::Array(inner) => self.element(inner),
            Ty::Named(name) if is_id(name) => name.clone(),
            Ty::Named(name) => match self.types.get(name) {
                Some(Def::Alias(inner)) => self.element(inner),
                _ => name.clone(),
            },
        }
    }

    /// The id types, and the object types that hold one somewhere.
    fn reaching(&self) -> BTreeSet<String> {
        let mut reach: BTreeSet<String> = IDS.iter().map(|(t, _)| (*t).to_owned()).collect();
        loop {
            let more: Vec<String> = self
                .types
                .iter()
                .filter(|(n, _)| !reach.contains(*n))
                .filter(|(_, d)| match d {
                    Def::Object(fields) => fields
                        .iter()
                        .any(|(_, t)| reach.contains(&self.element(t))),
                    Def::Alias(_) => false,
                })
                .map(|(n, _)| n.clone())
                .collect();
            if more.is_empty() {
                return reach;
            }
            reach.extend(more);
        }
    }
}

fn is_id(name: &str) -> bool {
    IDS.iter().any(|(t, _)| *t == name)
}

/// `DOM.Node` → `DOM_NODE`, `Page.FrameTree` → `PAGE_FRAME_TREE`.
fn static_name(ty: &str) -> String {
    let mut out = String::new();
    let mut last = ' ';
    for c in ty.chars() {
        if c == '.' {
            out.push('_');
        } else {
            if c.is_ascii_uppercase() && (last.is_ascii_lowercase() || last.is_ascii_digit()) {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        last = c;
    }
    out
}

/// The table's text, as `schema.rs` holds it.
/// The table's header: its doc, the lookups, and the commands' table opened.
fn header(crate_version: &str, revision: u32, commands: usize) -> String {
    format!(
        "//! Which fields of which CDP messages hold the ids the front keeps ([`Kind`]), from the\n\
         //! PDL of {crate_version} (CDP revision {revision}), and by hand (the PDL says `object`):\n\
         //! `Runtime.ExecutionContextDescription.auxData.frameId`. An array field holds its\n\
         //! elements' shape. Sorted by method, for a binary search.\n\
         //!\n\
         //! Generated by `schema/tests.rs`; do not edit. Refresh: `{REFRESH}`.\n\
         \n\
         use super::shape::{{Field, Kind, Method}};\n\
         \n\
         /// The chromiumoxide_cdp release whose protocol this is.\n\
         pub(super) const CDP_CRATE: &str = {crate_version:?};\n\
         \n\
         /// Its CDP revision (`chromiumoxide_cdp::CURRENT_REVISION`).\n\
         pub(super) const REVISION: u32 = {revision};\n\
         \n\
         /// The fields of command `method`'s params and reply that hold ids, if any do.\n\
         pub(super) fn command(method: &str) -> Option<&'static Method> {{\n\
         \x20   let i = COMMANDS.binary_search_by(|(m, _)| (*m).cmp(method)).ok()?;\n\
         \x20   Some(&COMMANDS[i].1)\n\
         }}\n\
         \n\
         /// The fields of event `method`'s params that hold ids, if any do.\n\
         pub(super) fn event(method: &str) -> Option<&'static [Field]> {{\n\
         \x20   let i = EVENTS.binary_search_by(|(m, _)| (*m).cmp(method)).ok()?;\n\
         \x20   Some(EVENTS[i].1)\n\
         }}\n\
         \n\
         /// {} commands.\n\
         pub(super) static COMMANDS: [(&str, Method); {}] = [\n",
        commands,
        commands
    )
}

fn render(p: &Protocol, crate_version: &str, revision: u32) -> String {
    let reach = p.reaching();
    let fields = |list: &Fields| -> Vec<String> {
        list.iter()
            .filter_map(|(name, ty)| {
                let element = p.element(ty);
                if let Some((_, kind)) = IDS.iter().find(|(t, _)| *t == element) {
                    Some(format!("Field::id({name:?}, Kind::{kind})"))
                } else if reach.contains(&element) {
                    Some(format!("Field::obj({name:?}, &{})", static_name(&element)))
                } else {
                    None
                }
            })
            .collect()
    };
    let list = |f: Vec<String>| format!("&[{}]", f.join(", "));
    let commands: Vec<String> = p
        .commands
        .iter()
        .filter_map(|(m, (params, result))| {
            let (params, result) = (fields(params), fields(result));
            (!params.is_empty() || !result.is_empty()).then(|| {
                format!(
                    "    ({m:?}, Method {{ params: {}, result: {} }}),\n",
                    list(params),
                    list(result)
                )
            })
        })
        .collect();
    let events: Vec<String> = p
        .events
        .iter()
        .filter_map(|(m, params)| {
            let params = fields(params);
            (!params.is_empty()).then(|| format!("    ({m:?}, {}),\n", list(params)))
        })
        .collect();
    let mut out = header(crate_version, revision, commands.len());
    out.extend(commands);
    let _ = write!(
        out,
        "];\n\n/// {} events.\npub(super) static EVENTS: [(&str, &[Field]); {}] = [\n",
        events.len(),
        events.len()
    );
    out.extend(events);
    out.push_str("];\n");
    let mut names = BTreeSet::new();
    for name in reach.iter().filter(|n| !is_id(n)) {
        let Some(Def::Object(list)) = p.types.get(name) else {
            unreachable!("only object types reach")
        };
        let f = fields(list);
        let s = static_name(name);
        assert!(names.insert(s.clone()), "two types named {s}");
        let _ = write!(
            out,
            "\n/// `{name}`.\nstatic {s}: [Field; {}] = [\n",
            f.len()
        );
        for field in f {
            let _ = writeln!(out, "    {field},");
        }
        out.push_str("];\n");
    }
    out.push_str("\n#[cfg(test)]\nmod tests;\n");
    out
}

/// The workspace's `Cargo.lock`'s version of `package`.
fn locked_version(package: &str) -> String {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
    let text = std::fs::read_to_string(lock).expect("Cargo.lock");
    let at = text
        .find(&format!("name = \"{package}\"\nversion = \""))
        .unwrap_or_else(|| panic!("{package} in Cargo.lock"));
    let rest = &text[at..];
    let start = rest.find("version = \"").expect("a version") + "version = \"".len();
    rest[start..][..rest[start..].find('"').expect("a quote")].to_owned()
}

/// The source of `package-version` in cargo's registry.
fn registry_source(package_version: &str) -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let registries = home.join("registry/src");
    std::fs::read_dir(&registries)
        .unwrap_or_else(|e| panic!("{}: {e}", registries.display()))
        .map(|e| e.expect("a registry").path().join(package_version))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("{package_version} in {} (cargo fetch)", registries.display()))
}

/// The CDP revision a chromiumoxide_cdp source says it is.
fn revision_of(source: &Path) -> u32 {
    let lib = std::fs::read_to_string(source.join("src/lib.rs")).expect("its lib.rs");
    let mark = "CURRENT_REVISION: Revision = Revision(";
    let at = lib.find(mark).expect("CURRENT_REVISION") + mark.len();
    lib[at..][..lib[at..].find(')').expect("a paren")]
        .parse()
        .expect("a revision number")
}

#[test]
fn the_table_is_derived_from_the_locked_protocol() {
    let version = locked_version("chromiumoxide_cdp");
    let source = registry_source(&format!("chromiumoxide_cdp-{version}"));
    let protocol = Protocol::read(&source.join("pdl")).with_extras();
    let rendered = render(
        &protocol,
        &format!("chromiumoxide_cdp {version}"),
        revision_of(&source),
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/front/swap/schema.rs");
    if std::env::var_os("OUTLIVE_BLESS").is_some() {
        std::fs::write(&path, &rendered).expect("write schema.rs");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "front/swap/schema.rs is stale: chromiumoxide_cdp or the generator changed. Refresh:\n    {REFRESH}"
    );
}

#[test]
fn the_tables_are_sorted_for_the_binary_search() {
    assert!(COMMANDS.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(EVENTS.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(REVISION > 0 && CDP_CRATE.starts_with("chromiumoxide_cdp "));
}

/// The field `path` (dot-separated) of `fields`.
fn field<'f>(fields: &'f [Field], path: &str) -> &'f Shape {
    let (head, rest) = path.split_once('.').map_or((path, None), |(h, r)| (h, Some(r)));
    let f = fields.iter().find(|f| f.name == head);
    let shape = &f.unwrap_or_else(|| panic!("no field {head}")).shape;
    match (rest, shape) {
        (None, s) => s,
        (Some(rest), Shape::Obj(inner)) => field(inner, rest),
        (Some(_), Shape::Id(_)) => panic!("{head} is an id"),
    }
}

fn kind(shape: &Shape) -> Kind {
    match shape {
        Shape::Id(k) => *k,
        Shape::Obj(_) => panic!("an object, not an id"),
    }
}

#[test]
fn the_fields_clients_rely_on_are_there() {
    let attached = event("Target.attachedToTarget").expect("attachedToTarget");
    assert_eq!(kind(field(attached, "sessionId")), Kind::Session);
    assert_eq!(kind(field(attached, "targetInfo.targetId")), Kind::Target);
    assert_eq!(
        kind(field(attached, "targetInfo.browserContextId")),
        Kind::BrowserContext
    );
    let created = event("Runtime.executionContextCreated").expect("contextCreated");
    assert_eq!(kind(field(created, "context.id")), Kind::ExecutionContext);
    assert_eq!(kind(field(created, "context.auxData.frameId")), Kind::Frame);
    let navigated = event("Page.frameNavigated").expect("frameNavigated");
    assert_eq!(kind(field(navigated, "frame.id")), Kind::Frame);
    assert_eq!(kind(field(navigated, "frame.parentId")), Kind::Frame);
    // Recursive: the tree's children are trees.
    let tree = command("Page.getFrameTree").expect("getFrameTree").result;
    assert_eq!(kind(field(tree, "frameTree.childFrames.childFrames.frame.id")), Kind::Frame);
    let add = command("Page.addScriptToEvaluateOnNewDocument").expect("addScript");
    assert_eq!(kind(field(add.result, "identifier")), Kind::Script);
    let evaluate = command("Runtime.evaluate").expect("evaluate");
    assert_eq!(kind(field(evaluate.params, "contextId")), Kind::ExecutionContext);
    let navigate = command("Page.navigate").expect("navigate");
    assert_eq!(kind(field(navigate.params, "frameId")), Kind::Frame);
    assert_eq!(kind(field(navigate.result, "frameId")), Kind::Frame);
    assert!(command("Page.captureScreenshot").is_none());
    assert!(event("Page.loadEventFired").is_none());
}
