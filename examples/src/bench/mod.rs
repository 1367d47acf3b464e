//! Support for the `bench` program: statistics, `mntr` counters, `/proc`
//! readings, the results table with its targets, and SVG line charts.

pub mod bare;
pub mod io_thread;
pub mod mntr;
pub mod procfs;
pub mod reader;
pub mod report;
pub mod scale;
pub mod scale_child;
pub mod slots;
pub mod stats;
pub mod svg;
