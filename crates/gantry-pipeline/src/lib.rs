pub mod yaml;
pub mod duration;
pub mod expand;
pub mod expr;
