# The CLI's https:// test: `openssl` makes a test CA and certificate and serves them (`openssl s_server`).
apt_install openssl
