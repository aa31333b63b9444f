package dev.stepwell;

import io.grpc.Status;
import java.util.List;
import java.util.Map;

/** ABORTED / LEASE_LOST: the lease token is not the current holder's. */
public class LeaseLostException extends StepwellException {
  public LeaseLostException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    super(code, message, reason, field, metadata, violations, cause);
  }
}
