package dev.stepwell;

import java.nio.charset.StandardCharsets;
import java.time.Duration;

/** Options of {@code once()}; every setter returns a copy. */
public final class OnceOptions {
  private byte[] fingerprint = new byte[0];
  private Duration lease = Duration.ofSeconds(30);
  private Duration retention;
  private Duration heartbeat;
  private Duration waitTimeout = Duration.ofSeconds(60);
  private Duration pollInterval = Duration.ofMillis(50);

  public static OnceOptions defaults() {
    return new OnceOptions();
  }

  private OnceOptions copy() {
    OnceOptions o = new OnceOptions();
    o.fingerprint = fingerprint;
    o.lease = lease;
    o.retention = retention;
    o.heartbeat = heartbeat;
    o.waitTimeout = waitTimeout;
    o.pollInterval = pollInterval;
    return o;
  }

  /** A hash of the operation's parameters; another fingerprint for the same key is KEY_REUSED. */
  public OnceOptions fingerprint(byte[] v) {
    OnceOptions o = copy();
    o.fingerprint = v.clone();
    return o;
  }

  public OnceOptions fingerprint(String v) {
    return fingerprint(v.getBytes(StandardCharsets.UTF_8));
  }

  /** The lease asked for by Begin and every heartbeat (default 30 s). */
  public OnceOptions lease(Duration v) {
    OnceOptions o = copy();
    o.lease = v;
    return o;
  }

  /** How long the record is kept once completed (default: the sidecar's, 7 days). */
  public OnceOptions retention(Duration v) {
    OnceOptions o = copy();
    o.retention = v;
    return o;
  }

  /** How often the lease is extended while the operation runs (default lease / 3). */
  public OnceOptions heartbeat(Duration v) {
    OnceOptions o = copy();
    o.heartbeat = v;
    return o;
  }

  /** How long to wait overall for another holder (default 60 s). */
  public OnceOptions waitTimeout(Duration v) {
    OnceOptions o = copy();
    o.waitTimeout = v;
    return o;
  }

  /** First pause between Begin calls while another holder runs (doubles up to 1 s). */
  public OnceOptions pollInterval(Duration v) {
    OnceOptions o = copy();
    o.pollInterval = v;
    return o;
  }

  byte[] fingerprint() {
    return fingerprint;
  }

  Duration lease() {
    return lease;
  }

  Duration retention() {
    return retention;
  }

  Duration heartbeatOrDefault() {
    if (heartbeat != null) return heartbeat;
    Duration third = lease.dividedBy(3);
    return third.compareTo(Duration.ofMillis(10)) < 0 ? Duration.ofMillis(10) : third;
  }

  Duration waitTimeout() {
    return waitTimeout;
  }

  Duration pollInterval() {
    return pollInterval;
  }
}
