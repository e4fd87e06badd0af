//! rcomm's own form of a topology: the model as JSON (`RCOMM_TOPO_FILE`, `rcomm-topo --dump`).

use super::TopoError;
use super::model::Topology;
use std::io::Read;
use std::path::Path;

/// Largest topology text accepted. A 4096-PU machine with its I/O is well under 4 MiB; beyond
/// this the input is a mistake (or hostile), and parsing it would only cost memory.
pub const MAX_JSON: usize = 64 << 20;

impl Topology {
    /// This topology in rcomm's form (pretty JSON).
    pub fn to_json(&self) -> String {
        // The model has no maps with non-string keys, the only thing the writer refuses.
        super::jsonv::to_string_pretty(self).expect("the topology model always serialises")
    }

    /// Reads rcomm's form, refusing text over [`MAX_JSON`] and any topology that fails
    /// [`Topology::validate`].
    pub fn from_json(text: &str) -> Result<Topology, TopoError> {
        let bad = |why: String| TopoError::File {
            path: "<json>".into(),
            why,
        };
        if text.len() > MAX_JSON {
            return Err(bad(format!(
                "{} bytes, more than the {MAX_JSON} a topology may have",
                text.len()
            )));
        }
        let t: Topology = super::jsonv::from_str(text)
            .map_err(|e| bad(format!("not a topology in rcomm's form: {e}")))?;
        t.validate().map_err(bad)?;
        Ok(t)
    }

    /// Reads a file in rcomm's form; the result's source is that file.
    pub fn load(path: &Path) -> Result<Topology, TopoError> {
        let name = path.display().to_string();
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_JSON as u64 + 1).read_to_string(&mut text))
            .map_err(|source| TopoError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let mut t = Topology::from_json(&text).map_err(|e| match e {
            TopoError::File { why, .. } => TopoError::File {
                path: name.clone(),
                why,
            },
            e => e,
        })?;
        t.source = super::Source::File { path: name };
        Ok(t)
    }
}
