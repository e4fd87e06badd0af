//! Rust source reduced to the tokens that can name a module: comments, string and character
//! literals blanked (newlines kept, so every token keeps its line), then split into identifiers,
//! `::` and single punctuation.

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Ident(String),
    PathSep,
    Punct(u8),
    Other,
}

#[derive(Clone, Debug)]
pub struct Tok {
    pub kind: Kind,
    pub line: u32,
    /// Byte offset in the source (to read an attribute's literal back).
    pub pos: usize,
}

impl Tok {
    pub fn is_ident(&self, s: &str) -> bool {
        matches!(&self.kind, Kind::Ident(i) if i == s)
    }
    pub fn is_punct(&self, c: u8) -> bool {
        self.kind == Kind::Punct(c)
    }
    pub fn ident(&self) -> Option<&str> {
        match &self.kind {
            Kind::Ident(i) => Some(i),
            _ => None,
        }
    }
}

fn ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// The source with every comment and literal's bytes replaced by spaces, newlines kept.
pub fn blank(src: &str) -> Vec<u8> {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let n = b.len();
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for x in &mut out[from..to.min(n)] {
            if *x != b'\n' {
                *x = b' ';
            }
        }
    };
    let mut i = 0;
    while i < n {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            let end = b[i..].iter().position(|&x| x == b'\n').map_or(n, |p| i + p);
            wipe(&mut out, i, end);
            i = end;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < n && depth > 0 {
                if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            wipe(&mut out, i, j);
            i = j;
        } else if ident_byte(c) {
            let start = i;
            while i < n && ident_byte(b[i]) {
                i += 1;
            }
            let raw = matches!(&b[start..i], b"r" | b"br" | b"cr");
            let mut j = i;
            while raw && b.get(j) == Some(&b'#') {
                j += 1;
            }
            if raw && b.get(j) == Some(&b'"') {
                // Raw string: ends at a quote followed by as many hashes as it opened with.
                let hashes = j - i;
                let mut k = j + 1;
                let end = loop {
                    if k >= n {
                        break n;
                    }
                    if b[k] == b'"'
                        && b[k + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == b'#')
                            .count()
                            == hashes
                    {
                        break k + 1 + hashes;
                    }
                    k += 1;
                };
                wipe(&mut out, start, end);
                i = end;
            }
        } else if c == b'"' {
            let mut j = i + 1;
            while j < n && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            wipe(&mut out, i, j + 1);
            i = j + 1;
        } else if c == b'\'' {
            // A character literal, or a lifetime / label (left as is).
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 3;
                while j < n && b[j] != b'\'' {
                    j += 1;
                }
                wipe(&mut out, i, j + 1);
                i = j + 1;
            } else {
                let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                if b.get(i + 1 + ch_len) == Some(&b'\'') {
                    wipe(&mut out, i, i + 2 + ch_len);
                    i += 2 + ch_len;
                } else {
                    i += 1;
                }
            }
        } else {
            i += 1;
        }
    }
    out
}

pub fn tokens(src: &str) -> Vec<Tok> {
    let b = blank(src);
    let n = b.len();
    let mut toks = Vec::new();
    let (mut i, mut line) = (0, 1u32);
    while i < n {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            while i < n && ident_byte(b[i]) {
                i += 1;
            }
            toks.push(Tok {
                kind: Kind::Other,
                line,
                pos: i,
            });
        } else if ident_byte(c) {
            let start = i;
            while i < n && ident_byte(b[i]) {
                i += 1;
            }
            let mut word = String::from_utf8_lossy(&b[start..i]).into_owned();
            // r#name is the identifier name.
            if word == "r"
                && b.get(i) == Some(&b'#')
                && b.get(i + 1).is_some_and(|&x| ident_byte(x))
            {
                let s = i + 1;
                i = s;
                while i < n && ident_byte(b[i]) {
                    i += 1;
                }
                word = String::from_utf8_lossy(&b[s..i]).into_owned();
            }
            toks.push(Tok {
                kind: Kind::Ident(word),
                line,
                pos: start,
            });
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            toks.push(Tok {
                kind: Kind::PathSep,
                line,
                pos: i,
            });
            i += 2;
        } else {
            toks.push(Tok {
                kind: Kind::Punct(c),
                line,
                pos: i,
            });
            i += 1;
        }
    }
    toks
}
