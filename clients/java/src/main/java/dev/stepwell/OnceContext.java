package dev.stepwell;

/**
 * What {@code once()} hands to the operation. {@link #previousLeaseExpired()} is true when an
 * earlier holder's lease ran out without Complete or Release: the effect may already have
 * happened, so check the downstream system before acting again. {@link #leaseLost()} turns true
 * if a heartbeat (Extend) found the lease taken over while the operation ran.
 */
public final class OnceContext {
  private final String key;
  private final long leaseToken;
  private final int attempt;
  private final boolean previousLeaseExpired;
  private volatile boolean leaseLost;
  /** When the lease ends at the latest, by this process's nanoTime. */
  private volatile long leaseEnd;

  OnceContext(String key, long leaseToken, int attempt, boolean previousLeaseExpired) {
    this.key = key;
    this.leaseToken = leaseToken;
    this.attempt = attempt;
    this.previousLeaseExpired = previousLeaseExpired;
  }

  public String key() {
    return key;
  }

  /** The fencing token of this attempt. */
  public long leaseToken() {
    return leaseToken;
  }

  /** 1 for the first attempt, then one more per acquisition. */
  public int attempt() {
    return attempt;
  }

  public boolean previousLeaseExpired() {
    return previousLeaseExpired;
  }

  public boolean leaseLost() {
    return leaseLost;
  }

  void markLeaseLost() {
    leaseLost = true;
  }

  /** The lease was granted or extended until {@code end} (nanoTime) at the latest. */
  void leaseRenewed(long end) {
    leaseEnd = end;
  }

  long leaseEnd() {
    return leaseEnd;
  }
}
