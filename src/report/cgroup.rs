//! The writer's cgroup as every report names it: its id (what the hit program read with
//! `bpf_get_current_cgroup_id`), its path in the v2 hierarchy, and the container id that path holds where
//! a runtime named it. The path is looked up once per id ([`CgroupNames`]); a cgroup removed before it
//! could be named keeps its id and says so.
//!
//! Where each report puts it: the text stream does not (a line per hit stays short), `--summary` counts
//! hits by cgroup; JSON hit records carry `cgroup_id`, `cgroup` and, where the path holds one,
//! `container_id` and `container_runtime`, and the JSON summary the same tally; OTLP log records the
//! attributes `ksymwatch.cgroup.id`, `ksymwatch.cgroup.path`, `container.id` and `container.runtime`
//! (OpenTelemetry's names for the last two); Perfetto an argument on each hit's instant.

use std::collections::HashMap;

use crate::model::cgroup::{self, Container};

/// One writer's cgroup, named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupName {
    pub id: u64,
    /// Its path in the hierarchy; `None` when no cgroup of this id was found (removed since).
    pub path: Option<String>,
    /// The container the path belongs to, where a runtime named it.
    pub container: Option<Container>,
}

impl CgroupName {
    /// Cgroup `id` at `path` (`None`: not found), its container read from the path.
    pub fn new(id: u64, path: Option<String>) -> CgroupName {
        let container = path.as_deref().and_then(cgroup::container);
        CgroupName {
            id,
            path,
            container,
        }
    }

    /// The path, or what stands for it when the cgroup is gone: `(removed, id N)`.
    pub fn display_path(&self) -> String {
        match &self.path {
            Some(p) => p.clone(),
            None => format!("(removed, id {})", self.id),
        }
    }

    /// The container id, where there is one.
    pub fn container_id(&self) -> Option<&str> {
        self.container.as_ref().map(|c| c.id.as_str())
    }

    /// The runtime that named the container, where there is one.
    pub fn container_runtime(&self) -> Option<&'static str> {
        self.container.as_ref().map(|c| c.runtime.name())
    }
}

/// Cgroup ids to their names, each id looked up once.
pub struct CgroupNames {
    names: HashMap<u64, CgroupName>,
    lookup: Box<dyn FnMut(u64) -> Option<String>>,
}

impl CgroupNames {
    /// Names found with `lookup` (an id to its path in the hierarchy, `None` when there is none).
    pub fn new(lookup: Box<dyn FnMut(u64) -> Option<String>>) -> CgroupNames {
        CgroupNames {
            names: HashMap::new(),
            lookup,
        }
    }

    /// Cgroup `id`'s name, looked up the first time it is asked for.
    pub fn name(&mut self, id: u64) -> &CgroupName {
        let lookup = &mut self.lookup;
        self.names
            .entry(id)
            .or_insert_with(|| CgroupName::new(id, lookup(id)))
    }
}

impl std::fmt::Debug for CgroupNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CgroupNames({} named)", self.names.len())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::model::cgroup::Runtime;

    pub(crate) const ID: &str = "4f1c2a9e0b7d6c5a3e2f1d0c9b8a7f6e5d4c3b2a19081726354453627180a9bc";

    /// A made-up pod's container cgroup (id 0x1a) as containerd names it.
    pub(crate) fn pod() -> CgroupName {
        CgroupName::new(
            0x1a,
            Some(format!(
                "/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope"
            )),
        )
    }

    #[test]
    fn each_id_is_looked_up_once_and_a_removed_one_keeps_its_id() {
        let asked = Rc::new(RefCell::new(Vec::new()));
        let seen = asked.clone();
        let mut names = CgroupNames::new(Box::new(move |id| {
            seen.borrow_mut().push(id);
            (id == 7).then(|| format!("/system.slice/docker-{ID}.scope"))
        }));
        let n = names.name(7).clone();
        assert_eq!(n.container_id(), Some(ID));
        assert_eq!(n.container_runtime(), Some("docker"));
        assert_eq!(n.display_path(), format!("/system.slice/docker-{ID}.scope"));
        names.name(7);
        let gone = names.name(9).clone();
        names.name(9);
        assert_eq!(*asked.borrow(), [7, 9], "once per id, a miss included");
        assert_eq!(gone.display_path(), "(removed, id 9)");
        assert_eq!((gone.path, gone.container), (None, None));
        assert_eq!(
            pod().container.map(|c| c.runtime),
            Some(Runtime::Containerd)
        );
        assert_eq!(CgroupName::new(1, Some("/".into())).container_id(), None);
    }
}
