pub mod certs;
