//! Pure renderers of state: the work-state block (model-facing) and the sidebar (person-facing).

pub mod sidebar;
pub mod work_state;
