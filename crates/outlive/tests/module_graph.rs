//! The files of `outlive` import each other without a circle.
//!
//! The graph: one node per file of `src/` (tests left out: `tests.rs`, `tests/`,
//! `test_support.rs`, `#[cfg(test)]` items). An edge F → G when F names an item through a path
//! that resolves to G's module: `crate::…`, `super::…`, `self::…`, or a child module's name
//! (`driver::run`). A path resolves to the deepest module file it names, and a name the crate
//! root re-exports (`crate::Ctx`) to the file it comes from. A parent's bare `mod child;` is
//! no edge. Comments and string literals are skipped. The test fails naming each circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path from the crate root: `["relay", "driver"]`; the root is empty.
type Module = Vec<String>;

#[test]
fn no_file_imports_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    read_dir(&src, &src, &mut files);
    let graph = Graph::of(&files);
    let circles: Vec<String> = graph.circles().iter().map(|c| graph.show(c)).collect();
    assert!(
        circles.is_empty(),
        "the module graph has {} circle(s):\n{}",
        circles.len(),
        circles.join("\n")
    );
}

/// Every source file under `dir` but the tests, by module, with its code (see [`code`]).
fn read_dir(root: &Path, dir: &Path, files: &mut BTreeMap<Module, (String, String)>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("src is readable").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                read_dir(root, &path, files);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && name != "test_support.rs" {
            let rel = path.strip_prefix(root).expect("under src");
            let rel = rel.to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).expect("source is UTF-8");
            files.insert(module_of(&rel), (rel, without_tests(&code(&text))));
        }
    }
}

/// `relay/driver.rs` is `relay::driver`; `checkpoint/mod.rs` is `checkpoint`; `lib.rs` the root.
fn module_of(rel: &str) -> Module {
    let mut module: Module = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    module
}

/// The code of a file: comments dropped, string and char literals emptied.
fn code(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let (mut out, mut i) = (String::new(), 0);
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    while i < s.len() {
        let c = s[i];
        let hashes = s[i + 1..].iter().take_while(|&&h| h == '#').count();
        let before = (at(i.wrapping_sub(1)), at(i.wrapping_sub(2)));
        let starts = !ident_char(before.0) || (before.0 == 'b' && !ident_char(before.1));
        let raw = c == 'r' && at(i + 1 + hashes) == '"' && starts;
        if c == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                match (at(i), at(i + 1)) {
                    ('/', '*') => (depth, i) = (depth + 1, i + 2),
                    ('*', '/') => (depth, i) = (depth - 1, i + 2),
                    ('\0', _) => break,
                    _ => i += 1,
                }
                if depth == 0 {
                    break;
                }
            }
            out.push(' ');
        } else if raw {
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let body: String = s[i + 2 + hashes..].iter().collect();
            let len = body
                .find(&close)
                .map_or(body.len(), |n| body[..n].chars().count());
            i += 2 + hashes + len + close.len();
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A char literal; a lone quote is a lifetime.
            i += if at(i + 1) == '\\' { 2 } else { 1 };
            while i < s.len() && s[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `code` without its `#[cfg(test)]` items (up to their `;` or their closing brace).
fn without_tests(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::new();
    let mut rest = code;
    while let Some(start) = rest.find(MARK) {
        out.push_str(&rest[..start]);
        rest = &rest[start + MARK.len()..];
        let mut depth = 0;
        let end = rest.char_indices().find(|&(_, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0 && matches!(c, ';' | '}')
        });
        rest = &rest[end.map_or(rest.len(), |(i, _)| i + 1)..];
    }
    out.push_str(rest);
    out
}

/// The code's tokens: identifiers, `::`, and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let s: Vec<char> = code.chars().collect();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < s.len() {
        if ident_char(s[i]) {
            let start = i;
            while i < s.len() && ident_char(s[i]) {
                i += 1;
            }
            out.push(s[start..i].iter().collect());
        } else if s[i] == ':' && s.get(i + 1) == Some(&':') {
            out.push("::".to_owned());
            i += 2;
        } else {
            if !s[i].is_whitespace() {
                out.push(s[i].to_string());
            }
            i += 1;
        }
    }
    out
}

/// Every path the code names: `use` trees expanded (`use a::{b, c::d}` names `a::b` and
/// `a::c::d`), and each `a::b::c` elsewhere.
fn paths(code: &str) -> Vec<Module> {
    let t = tokens(code);
    let (mut out, mut i) = (Vec::new(), 0);
    while i < t.len() {
        if t[i] == "use" {
            i = use_tree(&t, i + 1, &[], &mut out);
        } else if t[i] == "in" && i > 0 && t[i - 1] == "(" {
            // A visibility, `pub(in crate::relay)`, names no item.
            i = segments(&t, i + 1).1;
        } else if ident_char(t[i].chars().next().unwrap_or(' '))
            && t.get(i + 1).is_some_and(|n| n == "::")
        {
            let (path, next) = segments(&t, i);
            if i == 0 || t[i - 1] != "::" {
                out.push(path);
            }
            i = next;
        } else {
            i += 1;
        }
    }
    out
}

/// The segments `a::b::c` from token `i`, and the index after them.
fn segments(t: &[String], mut i: usize) -> (Module, usize) {
    let mut path = Vec::new();
    while i < t.len() && ident_char(t[i].chars().next().unwrap_or(' ')) {
        path.push(t[i].clone());
        if t.get(i + 1).map(String::as_str) != Some("::") {
            return (path, i + 1);
        }
        i += 2;
    }
    (path, i)
}

/// Reads the use tree from token `i` under `prefix` into `out`; answers the index after it.
fn use_tree(t: &[String], i: usize, prefix: &[String], out: &mut Vec<Module>) -> usize {
    let (segs, mut i) = segments(t, i);
    let mut path: Module = prefix.iter().cloned().chain(segs).collect();
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    match t.get(i).map(String::as_str) {
        Some("{") => {
            i += 1;
            while i < t.len() && t[i] != "}" {
                i = use_tree(t, i, &path, out);
                if t.get(i).is_some_and(|s| s == ",") {
                    i += 1;
                }
            }
            i + 1
        }
        Some("*") => {
            out.push(path);
            i + 1
        }
        Some("as") => {
            out.push(path);
            i + 2
        }
        _ => {
            out.push(path);
            i
        }
    }
}

struct Graph {
    names: BTreeMap<Module, String>,
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

impl Graph {
    fn of(files: &BTreeMap<Module, (String, String)>) -> Graph {
        let names = files.iter().map(|(m, (rel, _))| (m.clone(), rel.clone()));
        let mut graph = Graph {
            names: names.collect(),
            edges: BTreeMap::new(),
        };
        // What the root re-exports: `pub use ctx::{Ctx, …}` makes `crate::Ctx` ctx's.
        let root = &files[&Module::new()].1;
        let reexports: BTreeMap<String, Module> = paths(root)
            .into_iter()
            .filter_map(|p| Some((p.last()?.clone(), graph.resolve(&[], &p, &BTreeMap::new())?)))
            .filter(|(_, m)| !m.is_empty())
            .collect();
        for (module, (_, code)) in files {
            let to: BTreeSet<Module> = paths(code)
                .iter()
                .filter_map(|p| graph.resolve(module, p, &reexports))
                .filter(|m| m != module)
                .collect();
            graph.edges.insert(module.clone(), to);
        }
        graph
    }

    /// The file `path`, named in `module`, resolves to, if it is one of the crate's.
    fn resolve(
        &self,
        module: &[String],
        path: &[String],
        reexports: &BTreeMap<String, Module>,
    ) -> Option<Module> {
        let (first, rest) = path.split_first()?;
        let mut absolute: Module = match first.as_str() {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => module[..module.len().checked_sub(1)?].to_vec(),
            _ => {
                let child: Module = module.iter().chain([first]).cloned().collect();
                self.names.contains_key(&child).then_some(child)?
            }
        };
        let mut rest = rest;
        while rest.first().is_some_and(|s| s == "super") {
            absolute.pop();
            rest = &rest[1..];
        }
        absolute.extend(rest.iter().cloned());
        let deepest = (1..=absolute.len())
            .rev()
            .map(|n| absolute[..n].to_vec())
            .find(|m| self.names.contains_key(m));
        match (deepest, absolute.first()) {
            (Some(m), _) => Some(m),
            (None, Some(name)) => Some(reexports.get(name).cloned().unwrap_or_default()),
            (None, None) => Some(Module::new()),
        }
    }

    /// The strongly connected groups of more than one file (Tarjan's algorithm).
    fn circles(&self) -> Vec<Vec<Module>> {
        struct Walk<'g> {
            graph: &'g Graph,
            index: BTreeMap<&'g Module, usize>,
            stack: Vec<&'g Module>,
            found: Vec<Vec<Module>>,
        }
        impl<'g> Walk<'g> {
            fn visit(&mut self, v: &'g Module) -> usize {
                let n = self.index.len();
                self.index.insert(v, n);
                self.stack.push(v);
                let mut low = n;
                let graph = self.graph;
                for w in &graph.edges[v] {
                    low = match self.index.get(w) {
                        None => low.min(self.visit(w)),
                        Some(&i) if self.stack.contains(&w) => low.min(i),
                        Some(_) => low,
                    };
                }
                if low == n {
                    let at = self
                        .stack
                        .iter()
                        .position(|m| *m == v)
                        .expect("on the stack");
                    let group: Vec<Module> = self.stack.drain(at..).cloned().collect();
                    if group.len() > 1 {
                        self.found.push(group);
                    }
                }
                low
            }
        }
        let mut walk = Walk {
            graph: self,
            index: BTreeMap::new(),
            stack: Vec::new(),
            found: Vec::new(),
        };
        for v in self.edges.keys() {
            if !walk.index.contains_key(v) {
                walk.visit(v);
            }
        }
        walk.found
    }

    /// A circle's files, and one way round it: `a.rs → b.rs → a.rs`.
    fn show(&self, group: &[Module]) -> String {
        let members: BTreeSet<&Module> = group.iter().collect();
        let start = &group[0];
        // Breadth first from `start` back to it, inside the group.
        let mut came_from: BTreeMap<&Module, &Module> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        'search: while let Some(v) = queue.pop_front() {
            for w in self.edges[v].iter().filter(|w| members.contains(w)) {
                if w == start {
                    came_from.insert(start, v);
                    break 'search;
                }
                if !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        let mut way = vec![start];
        let mut v = came_from[start];
        while v != start {
            way.push(v);
            v = came_from[v];
        }
        way.push(start);
        way.reverse();
        let way: Vec<&str> = way.iter().map(|m| self.names[*m].as_str()).collect();
        let mut files: Vec<&str> = group.iter().map(|m| self.names[m].as_str()).collect();
        files.sort();
        format!(
            "  {} files: {}\n    e.g. {}",
            files.len(),
            files.join(", "),
            way.join(" → ")
        )
    }
}
