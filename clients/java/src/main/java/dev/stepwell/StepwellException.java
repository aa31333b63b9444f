package dev.stepwell;

import io.grpc.Status;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * A failed stepwell RPC. The sidecar sends a {@code google.rpc.Status} whose details carry a
 * {@code google.rpc.ErrorInfo} (domain {@code stepwell.dev}) and, for invalid input, a
 * {@code google.rpc.BadRequest}; they are decoded into {@link #reason()}, {@link #metadata()}
 * and {@link #field()}. Subclasses are named after the reasons.
 */
public class StepwellException extends RuntimeException {
  public static final String DOMAIN = "stepwell.dev";

  /** One BadRequest field violation. */
  public record FieldViolation(String field, String description) {}

  private final Status.Code code;
  private final String reason;
  private final String field;
  private final Map<String, String> metadata;
  private final List<FieldViolation> violations;
  private final String statusMessage;

  public StepwellException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    super(describe(code, message, reason, field), cause);
    this.code = code;
    this.statusMessage = message == null ? "" : message;
    this.reason = reason == null ? "" : reason;
    this.field = field == null ? "" : field;
    this.metadata = metadata == null ? Map.of() : Collections.unmodifiableMap(metadata);
    this.violations = violations == null ? List.of() : List.copyOf(violations);
  }

  private static String describe(Status.Code code, String message, String reason, String field) {
    StringBuilder b = new StringBuilder(code.name());
    if (reason != null && !reason.isEmpty()) b.append(' ').append(reason);
    if (field != null && !field.isEmpty()) b.append(" (field ").append(field).append(')');
    if (message != null && !message.isEmpty()) b.append(": ").append(message);
    return b.toString();
  }

  /** The gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /** The ErrorInfo reason, or "" when the server sent none. */
  public String reason() {
    return reason;
  }

  /** The first BadRequest field violation's field, or "". */
  public String field() {
    return field;
  }

  /** The ErrorInfo metadata. */
  public Map<String, String> metadata() {
    return metadata;
  }

  /** Every BadRequest field violation. */
  public List<FieldViolation> violations() {
    return violations;
  }

  /** The status message as the server sent it. */
  public String statusMessage() {
    return statusMessage;
  }

  /** Converts a gRPC failure into a StepwellException (or the subclass named by its reason). */
  public static StepwellException from(Throwable t) {
    return Errors.decode(t);
  }
}
