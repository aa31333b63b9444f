// SetClock: a test clock that reads one instant until it is set again.
package dev.stepwell;

import java.time.Clock;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;

/** A UTC clock that reads exactly one instant until {@link #set} changes it. */
final class SetClock extends Clock {
  private volatile Instant now;

  SetClock(Instant now) {
    this.now = now;
  }

  SetClock() {
    this(Instant.now());
  }

  void set(Instant t) {
    now = t;
  }

  @Override
  public Instant instant() {
    return now;
  }

  @Override
  public ZoneId getZone() {
    return ZoneOffset.UTC;
  }

  @Override
  public Clock withZone(ZoneId zone) {
    throw new UnsupportedOperationException("a test clock is UTC");
  }
}
