# Build, test and install pinnerd without a Debian package (docs/install.md).
#
#   make                          # cargo build --release
#   sudo make install             # into /usr/local (PREFIX) under / (DESTDIR)
#   make install DESTDIR=/tmp/stage PREFIX=/usr   # staged, for a distribution package
#   sudo make uninstall
#   make deb                      # the Debian package (cargo-deb)
#   make check                    # the tests: installs what they drive, then fmt, clippy, tests
#   sudo make vm-test             # the end-to-end test in a VM (tests/vm/run.sh)
#
# The unit's ExecStart= is rewritten to $(BINDIR)/pinnerd. systemd reads units from
# /usr/local/lib/systemd/system as well as /usr/lib/systemd/system; dbus-daemon reads
# policies from /usr/share/dbus-1/system.d and /etc/dbus-1/system.d only, so with a PREFIX
# other than /usr the policy goes to $(SYSCONFDIR)/dbus-1/system.d.

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
DOCDIR ?= $(DATADIR)/doc/pinnerd
SYSCONFDIR ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
ifeq ($(PREFIX),/usr)
DBUSPOLICYDIR ?= $(DATADIR)/dbus-1/system.d
else
DBUSPOLICYDIR ?= $(SYSCONFDIR)/dbus-1/system.d
endif
RULESDIR ?= $(SYSCONFDIR)/pinnerd.d
# Man pages, completions and the bus interface XML (docs/install.md, CONTRIBUTING.md "Generated files").
MANDIR ?= $(DATADIR)/man
DBUSIFACEDIR ?= $(DATADIR)/dbus-1/interfaces
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
FISHCOMPDIR ?= $(DATADIR)/fish/vendor_completions.d
ifeq ($(PREFIX),/usr)
ZSHCOMPDIR ?= $(DATADIR)/zsh/vendor-completions
else
ZSHCOMPDIR ?= $(DATADIR)/zsh/site-functions
endif
# polkitd reads actions from /usr/share/polkit-1/actions only, whatever the PREFIX.
POLKITACTIONDIR ?= /usr/share/polkit-1/actions

CARGO ?= cargo
INSTALL ?= install
BIN ?= target/release/pinnerd

.PHONY: all build check test-deps install uninstall deb vm-test

all: build

build:
	$(CARGO) build --release --locked

# The test command (CONTRIBUTING.md). On a fresh Debian or Ubuntu machine with a Rust
# toolchain it first installs the packages the tests drive (as root; otherwise it prints
# the apt-get line and stops), and rustfmt and clippy when rustup lacks them. The churn
# soak (tests/it/soak.rs, about 110 s) is left out of the main run and runs once, last.
check: test-deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --locked -- -D warnings
	$(CARGO) test --lib --bins --examples --benches --locked
	$(CARGO) test --test it --locked -- --skip soak::
	$(CARGO) test --test it --locked soak::

test-deps:
	tests/test-deps.sh
	@if command -v rustup >/dev/null; then \
		for c in rustfmt clippy; do \
			rustup component list --installed 2>/dev/null | grep -q "^$$c" || rustup component add $$c; \
		done; \
	fi

$(BIN):
	$(CARGO) build --release --locked

install: $(BIN)
	$(INSTALL) -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/pinnerd
	$(INSTALL) -d -m 0755 $(DESTDIR)$(SYSTEMDUNITDIR)
	sed 's|^ExecStart=/usr/bin/pinnerd|ExecStart=$(BINDIR)/pinnerd|' systemd/pinnerd.service \
		>$(DESTDIR)$(SYSTEMDUNITDIR)/pinnerd.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/pinnerd.service
	sed 's|^ExecStart=@/usr/bin/pinnerd|ExecStart=@$(BINDIR)/pinnerd|' systemd/pinnerd-partition@.service \
		>$(DESTDIR)$(SYSTEMDUNITDIR)/pinnerd-partition@.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/pinnerd-partition@.service
	$(INSTALL) -D -m 0644 systemd/pinnerd.tmpfiles $(DESTDIR)$(TMPFILESDIR)/pinnerd.conf
	$(INSTALL) -D -m 0644 systemd/org.pinnerd.Pinnerd1.conf \
		$(DESTDIR)$(DBUSPOLICYDIR)/org.pinnerd.Pinnerd1.conf
	$(INSTALL) -D -m 0644 polkit/org.pinnerd.policy \
		$(DESTDIR)$(POLKITACTIONDIR)/org.pinnerd.policy
	$(INSTALL) -d -m 0755 $(DESTDIR)$(RULESDIR)
	$(INSTALL) -D -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	$(INSTALL) -d -m 0755 $(DESTDIR)$(DOCDIR)/docs/images $(DESTDIR)$(DOCDIR)/docs/report
	$(INSTALL) -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -m 0644 docs/images/*.svg docs/images/README.md $(DESTDIR)$(DOCDIR)/docs/images/
	$(INSTALL) -m 0644 docs/report/*.png $(DESTDIR)$(DOCDIR)/docs/report/
	$(INSTALL) -D -m 0644 config/pinnerd.toml $(DESTDIR)$(DOCDIR)/examples/pinnerd.toml
	$(INSTALL) -d -m 0755 $(DESTDIR)$(DOCDIR)/examples/pinnerd.d
	$(INSTALL) -m 0644 config/pinnerd.d/*.toml $(DESTDIR)$(DOCDIR)/examples/pinnerd.d/
	$(INSTALL) -D -m 0644 man/pinnerd.8 $(DESTDIR)$(MANDIR)/man8/pinnerd.8
	$(INSTALL) -D -m 0644 man/pinnerd.d.5 $(DESTDIR)$(MANDIR)/man5/pinnerd.d.5
	$(INSTALL) -D -m 0644 man/pinnerd.toml.5 $(DESTDIR)$(MANDIR)/man5/pinnerd.toml.5
	$(INSTALL) -D -m 0644 systemd/org.pinnerd.Pinnerd1.xml \
		$(DESTDIR)$(DBUSIFACEDIR)/org.pinnerd.Pinnerd1.xml
	$(INSTALL) -D -m 0644 completions/pinnerd.bash $(DESTDIR)$(BASHCOMPDIR)/pinnerd
	$(INSTALL) -D -m 0644 completions/_pinnerd $(DESTDIR)$(ZSHCOMPDIR)/_pinnerd
	$(INSTALL) -D -m 0644 completions/pinnerd.fish $(DESTDIR)$(FISHCOMPDIR)/pinnerd.fish
	@echo "installed; to start it: systemctl daemon-reload && systemctl enable --now pinnerd"
	@echo "(and once after installing the bus policy: systemctl reload dbus)"

# Leaves $(RULESDIR) and its rules, and the state under /var/lib/pinnerd, in place.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/pinnerd
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/pinnerd.service $(DESTDIR)$(SYSTEMDUNITDIR)/pinnerd-partition@.service
	rm -f $(DESTDIR)$(TMPFILESDIR)/pinnerd.conf
	rm -f $(DESTDIR)$(DBUSPOLICYDIR)/org.pinnerd.Pinnerd1.conf
	rm -f $(DESTDIR)$(POLKITACTIONDIR)/org.pinnerd.policy
	rm -rf $(DESTDIR)$(DOCDIR)
	rm -f $(DESTDIR)$(MANDIR)/man8/pinnerd.8 $(DESTDIR)$(MANDIR)/man5/pinnerd.d.5 \
		$(DESTDIR)$(MANDIR)/man5/pinnerd.toml.5
	rm -f $(DESTDIR)$(DBUSIFACEDIR)/org.pinnerd.Pinnerd1.xml
	rm -f $(DESTDIR)$(BASHCOMPDIR)/pinnerd $(DESTDIR)$(ZSHCOMPDIR)/_pinnerd \
		$(DESTDIR)$(FISHCOMPDIR)/pinnerd.fish
	-rmdir $(DESTDIR)$(RULESDIR) 2>/dev/null

deb:
	$(CARGO) deb --locked

vm-test:
	tests/vm/run.sh
