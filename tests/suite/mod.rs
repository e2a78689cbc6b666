mod agent_loop;
mod binaries;
mod confinement;
mod errors;
mod policy;
mod python_sdk;
mod tools;
