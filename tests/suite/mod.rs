mod agent_loop;
mod binaries;
mod errors;
mod policy;
mod python_sdk;
