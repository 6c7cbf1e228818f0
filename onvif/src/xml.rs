//! The device's answers as a small element tree, read with `quick-xml` under limits.
//!
//! Why a tree: ONVIF answers are small (a GetProfiles of a 16-channel encoder is tens of
//! kilobytes) and the fields sit at varying depths and under whatever namespace prefixes
//! the vendor chose, so each parser below looks elements up by local name in a tree
//! rather than driving its own event loop.
//!
//! What is refused, before anything is built: a document over [`MAX_DOCUMENT`] bytes, any
//! `<!DOCTYPE …>` (so no internal or external entity is ever declared: XXE and "billion
//! laughs" fail here, by name, rather than depend on the reader not expanding them), a
//! reference to an entity other than XML's five predefined ones, nesting over
//! [`MAX_DEPTH`] and more than [`MAX_ELEMENTS`] elements.

use crate::Error;
use quick_xml::events::Event;
use quick_xml::Reader;

/// The largest answer read (the shell stops reading the HTTP body there too).
pub const MAX_DOCUMENT: usize = 1 << 20;
/// Deeper than any ONVIF schema goes; bounds the tree walks' recursion.
pub const MAX_DEPTH: usize = 64;
pub const MAX_ELEMENTS: usize = 50_000;

/// One element: its local name (prefix dropped), attributes by local name, children and
/// its own text (character data directly inside it, entities resolved).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Element {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<Element>,
    pub text: String,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The children named `name`.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// Down a path of child names.
    pub fn path(&self, names: &[&str]) -> Option<&Element> {
        names.iter().try_fold(self, |e, n| e.child(n))
    }

    /// The first descendant (or itself) named `name`, depth first.
    pub fn find(&self, name: &str) -> Option<&Element> {
        if self.name == name {
            return Some(self);
        }
        self.children.iter().find_map(|c| c.find(name))
    }

    /// Every descendant (or itself) named `name`, in document order; not inside a match.
    pub fn find_all<'a>(&'a self, name: &str, out: &mut Vec<&'a Element>) {
        if self.name == name {
            out.push(self);
            return;
        }
        for c in &self.children {
            c.find_all(name, out);
        }
    }

    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Its text, trimmed.
    pub fn text(&self) -> &str {
        self.text.trim()
    }
}

fn local(name: &[u8]) -> String {
    let local = match name.iter().rposition(|&b| b == b':') {
        Some(i) => &name[i + 1..],
        None => name,
    };
    String::from_utf8_lossy(local).into_owned()
}

fn xml_err(e: impl std::fmt::Display) -> Error {
    Error::Xml(crate::printable(&e.to_string()))
}

fn open(e: &quick_xml::events::BytesStart<'_>) -> Result<Element, Error> {
    let mut attrs = Vec::new();
    for a in e.attributes() {
        let a = a.map_err(xml_err)?;
        let key = local(a.key.as_ref());
        let raw = String::from_utf8_lossy(&a.value).into_owned();
        attrs.push((key, unescape(&raw)?));
    }
    Ok(Element {
        name: local(e.name().as_ref()),
        attrs,
        children: Vec::new(),
        text: String::new(),
    })
}

/// Resolves XML's five entities and character references; any other name is refused
/// (no DTD is read, so no other entity can be declared).
fn unescape(raw: &str) -> Result<String, Error> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let end = after
            .find(';')
            .ok_or_else(|| Error::Xml("an unterminated entity reference".into()))?;
        out.push(entity(&after[..end])?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn entity(name: &str) -> Result<char, Error> {
    let c = match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "apos" => '\'',
        "quot" => '"',
        _ => {
            let code = if let Some(hex) = name.strip_prefix("#x") {
                u32::from_str_radix(hex, 16).ok()
            } else if let Some(dec) = name.strip_prefix('#') {
                dec.parse().ok()
            } else {
                None
            };
            return code
                .and_then(char::from_u32)
                .ok_or_else(|| Error::UnknownEntity(crate::printable(name)));
        }
    };
    Ok(c)
}

/// Reads `bytes` into the root element, under the limits of this module.
pub fn parse(bytes: &[u8]) -> Result<Element, Error> {
    if bytes.len() > MAX_DOCUMENT {
        return Err(Error::TooLarge {
            len: bytes.len(),
            max: MAX_DOCUMENT,
        });
    }
    let mut reader = Reader::from_reader(bytes);
    reader.config_mut().trim_text(false);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut count = 0usize;
    let mut buf = Vec::new();
    loop {
        let ev = reader.read_event_into(&mut buf).map_err(xml_err)?;
        match ev {
            Event::DocType(_) => return Err(Error::Dtd),
            Event::Start(_) | Event::Empty(_) if root.is_some() => {
                return Err(Error::Xml("content after the root element".into()));
            }
            Event::Start(e) => {
                count += 1;
                if count > MAX_ELEMENTS {
                    return Err(Error::TooManyElements(MAX_ELEMENTS));
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(Error::TooDeep(MAX_DEPTH));
                }
                stack.push(open(&e)?);
            }
            Event::Empty(e) => {
                count += 1;
                if count > MAX_ELEMENTS {
                    return Err(Error::TooManyElements(MAX_ELEMENTS));
                }
                let el = open(&e)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None => root = Some(el),
                }
            }
            Event::End(_) => {
                let el = stack
                    .pop()
                    .ok_or_else(|| Error::Xml("an end tag without a start".into()))?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None => root = Some(el),
                }
            }
            Event::Text(t) => {
                if let Some(top) = stack.last_mut() {
                    let raw = String::from_utf8_lossy(&t);
                    top.text.push_str(&unescape(&raw)?);
                }
            }
            Event::CData(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&String::from_utf8_lossy(&t));
                }
            }
            Event::GeneralRef(r) => {
                let name = String::from_utf8_lossy(&r).into_owned();
                let c = entity(&name)?;
                if let Some(top) = stack.last_mut() {
                    top.text.push(c);
                }
            }
            Event::Eof => break,
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
        }
        buf.clear();
    }
    if !stack.is_empty() {
        return Err(Error::Xml("the document ends inside an element".into()));
    }
    root.ok_or_else(|| Error::Xml("no root element".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_tree_with_prefixes_dropped_and_entities_resolved() {
        let doc = br#"<?xml version="1.0"?><a:Root xmlns:a="urn:x" b:k="v&amp;w"><a:Child>one &lt;two&gt; &#x41;&#66;</a:Child><Empty/><![CDATA[<raw>]]></a:Root>"#;
        let root = parse(doc).unwrap();
        assert_eq!(root.name, "Root");
        assert_eq!(root.attr("k"), Some("v&w"));
        assert_eq!(root.child("Child").unwrap().text(), "one <two> AB");
        assert!(root.child("Empty").is_some());
        assert_eq!(root.text(), "<raw>");
    }

    #[test]
    fn refuses_xxe() {
        let doc = br#"<?xml version="1.0"?>
<!DOCTYPE r [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<r>&xxe;</r>"#;
        assert!(matches!(parse(doc), Err(Error::Dtd)));
    }

    #[test]
    fn refuses_billion_laughs() {
        let doc = br#"<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<lolz>&lol3;</lolz>"#;
        assert!(matches!(parse(doc), Err(Error::Dtd)));
    }

    #[test]
    fn refuses_an_undeclared_entity_in_text_and_attributes() {
        assert!(matches!(parse(b"<r>&lol;</r>"), Err(Error::UnknownEntity(n)) if n == "lol"));
        assert!(matches!(
            parse(b"<r a=\"&lol;\"/>"),
            Err(Error::UnknownEntity(_))
        ));
    }

    #[test]
    fn refuses_deep_nesting_large_and_broken_documents() {
        let deep = "<a>".repeat(MAX_DEPTH + 1) + &"</a>".repeat(MAX_DEPTH + 1);
        assert!(matches!(parse(deep.as_bytes()), Err(Error::TooDeep(_))));
        let big = vec![b' '; MAX_DOCUMENT + 1];
        assert!(matches!(parse(&big), Err(Error::TooLarge { .. })));
        assert!(matches!(parse(b"<a><b></a>"), Err(Error::Xml(_))));
        assert!(matches!(parse(b"<a>"), Err(Error::Xml(_))));
        assert!(matches!(parse(b""), Err(Error::Xml(_))));
        assert!(matches!(parse(b"<a/><b/>"), Err(Error::Xml(_))));
    }
}
