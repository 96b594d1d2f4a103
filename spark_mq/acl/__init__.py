"""RocketMQ's plain ACL, server side: accounts (plain_acl.yml), what each request needs, the check, audit."""
