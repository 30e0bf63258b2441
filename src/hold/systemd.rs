//! Placeholder interface; replaced by the real client.
use crate::cpuset::CpuSet;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitInfo {
    pub name: String,
    pub cgroup: String,
    pub slice: String,
    pub delegate: bool,
}
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed {
    pub cpus: CpuSet,
    pub mems: CpuSet,
}
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error("systemd is not on the system bus: {0}")]
    NoSystemd(String),
    #[error("{what}: {message}")]
    Call { what: String, message: String },
}
pub trait Units: Send {
    fn unit_of_pid(&self, pid: u32) -> Result<UnitInfo, UnitError>;
    fn allowed(&self, unit: &str) -> Result<Allowed, UnitError>;
    fn effective(&self, unit: &str) -> Result<Allowed, UnitError>;
    fn set_allowed(&self, unit: &str, cpus: Option<&CpuSet>, mems: Option<&CpuSet>) -> Result<(), UnitError>;
    fn adopt(&self, scope: &str, slice: &str, pid: u32, allowed: &Allowed, description: &str) -> Result<(), UnitError>;
    fn partition_property(&self, unit: &str) -> Result<Option<String>, UnitError>;
    fn set_partition(&self, unit: &str, value: &str) -> Result<(), UnitError>;
}
pub struct SystemdUnits;
impl SystemdUnits {
    pub fn system() -> Result<SystemdUnits, UnitError> {
        Err(UnitError::NoSystemd("placeholder".into()))
    }
}
pub fn scope_name(rule: &str, pid: u32) -> String {
    format!("pinnerd-{rule}-{pid}.scope")
}
impl Units for SystemdUnits {
    fn unit_of_pid(&self, _: u32) -> Result<UnitInfo, UnitError> { unimplemented!() }
    fn allowed(&self, _: &str) -> Result<Allowed, UnitError> { unimplemented!() }
    fn effective(&self, _: &str) -> Result<Allowed, UnitError> { unimplemented!() }
    fn set_allowed(&self, _: &str, _: Option<&CpuSet>, _: Option<&CpuSet>) -> Result<(), UnitError> { unimplemented!() }
    fn adopt(&self, _: &str, _: &str, _: u32, _: &Allowed, _: &str) -> Result<(), UnitError> { unimplemented!() }
    fn partition_property(&self, _: &str) -> Result<Option<String>, UnitError> { unimplemented!() }
    fn set_partition(&self, _: &str, _: &str) -> Result<(), UnitError> { unimplemented!() }
}
