mod agent_loop;
mod errors;
mod policy;
mod python_sdk;
