//! The page around the sections: one HTML document with its stylesheet
//! inlined (no scripts, nothing fetched), printable, plus the escaping and
//! table helpers every section writes with.

use std::fmt::Write;

/// One section of the report: its body, or the one-line reason it is left
/// out (a study made without the runner has no memory attributes).
pub struct Section {
    pub id: &'static str,
    pub title: &'static str,
    pub body: Body,
}

pub enum Body {
    Shown(String),
    Omitted(String),
}

impl Section {
    pub fn shown(id: &'static str, title: &'static str, html: String) -> Self {
        Section {
            id,
            title,
            body: Body::Shown(html),
        }
    }

    pub fn omitted(id: &'static str, title: &'static str, why: impl Into<String>) -> Self {
        Section {
            id,
            title,
            body: Body::Omitted(why.into()),
        }
    }
}

/// Text made safe for HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c.is_control() && c != '\n' && c != '\t') || crate::render::is_bidi_format(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A table of escaped cells; `header` names the columns.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><thead><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// A short paragraph of escaped text.
pub fn note(text: &str) -> String {
    format!("<p class=\"note\">{}</p>", escape(text))
}

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f;
       max-width: 1200px; margin: 0 auto; padding: 16px 24px; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h2 { font-size: 18px; border-bottom: 1px solid #ccc; padding-bottom: 4px; margin-top: 28px; }
h3 { font-size: 15px; margin: 16px 0 4px; }
nav a { margin-right: 12px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f6; }
td { max-width: 640px; }
td:last-child { overflow-wrap: anywhere; }
figure.chart { margin: 8px 0; }
figure.chart svg { max-width: 100%; height: auto; }
.grid { display: flex; flex-wrap: wrap; gap: 8px; }
.omitted { color: #666; font-style: italic; }
.note { color: #444; }
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  nav { display: none; }
  section, figure.chart, table { break-inside: avoid; }
}
"#;

/// The whole document.
pub fn page(title: &str, subtitle: &str, sections: &[Section]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>{STYLE}</style></head><body>\
         <h1>{t}</h1><p class=\"note\">{s}</p><nav>",
        t = escape(title),
        s = escape(subtitle)
    );
    for s in sections {
        let _ = write!(out, "<a href=\"#{}\">{}</a>", s.id, escape(s.title));
    }
    out.push_str("</nav>");
    for s in sections {
        let _ = write!(out, "<section id=\"{}\"><h2>{}</h2>", s.id, escape(s.title));
        match &s.body {
            Body::Shown(html) => out.push_str(html),
            Body::Omitted(why) => {
                let _ = write!(out, "<p class=\"omitted\">Not shown: {}</p>", escape(why));
            }
        }
        out.push_str("</section>");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_cannot_open_a_tag() {
        assert_eq!(
            escape("<script>\"a\" & 'b'</script>"),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(escape("bell\u{7}"), "bell\\u{7}");
        // A right-to-left override would reverse what follows it.
        assert_eq!(escape("a\u{202e}b"), "a\\u{202e}b");
    }

    #[test]
    fn an_omitted_section_says_why() {
        let html = page(
            "t",
            "s",
            &[Section::omitted("memory", "Memory", "no memory attributes")],
        );
        assert!(html.contains("Not shown: no memory attributes"), "{html}");
        assert!(html.contains("<a href=\"#memory\">Memory</a>"));
    }
}
