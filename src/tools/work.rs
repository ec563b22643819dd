//! The To-do ledger: `work_update`, its validation and its legacy aliases. (Being written.)
